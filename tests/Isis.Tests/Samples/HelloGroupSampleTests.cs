namespace Isis.Tests.Samples;

/// <summary>The README's main command keeps working: the sample runs end to end and exits 0.</summary>
public sealed class HelloGroupSampleTests
{
    [Fact]
    public void HelloGroup_forms_a_group_survives_a_killed_member_and_exits_zero()
    {
        // The sample uses the default membership-service port, as a user's first run would.
        (int exitCode, string text) = SampleProgram.RunToTheEnd("HelloGroup", TimeSpan.FromSeconds(120));
        Assert.True(exitCode == 0, "HelloGroup failed:\n" + text);
        Assert.Contains("the survivors install a view without it", text);
        Assert.Contains("HelloGroup: done", text);
    }
}
