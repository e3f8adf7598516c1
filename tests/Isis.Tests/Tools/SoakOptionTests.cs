using System.Reflection;

namespace Isis.Tests.Tools;

/// <summary>
/// The soak harness's command line for the issue 25 target runs (tools/Isis.Soak): the all-SafeSend
/// mix, the stop after N SafeSends and the joiner-cost mode are listed in --help, and a bad value
/// of each is refused with exit code 2 and a message naming the option, before any process starts.
/// </summary>
public sealed class SoakOptionTests
{
    private static readonly TimeSpan Limit = TimeSpan.FromSeconds(60); // a liveness bound: the tool only parses and exits

    private static string Dll() =>
        typeof(SoakOptionTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "IsisSoakDll").Value!;

    [Fact]
    public async Task Help_lists_the_mix_the_stop_after_N_SafeSends_and_the_joiner_cost_mode()
    {
        var (exitCode, log) = await DotnetTool.RunToExit([Dll(), "--help"], Limit);
        Assert.Equal(0, exitCode);
        Assert.Contains("--mix M", log);
        Assert.Contains("--stop-after-safesends N", log);
        Assert.Contains("joiner-cost", log);
        Assert.Contains("--suspicion-count N", log);
    }

    [Theory]
    [InlineData(new[] { "--mix", "queries" }, "--mix is default or safesend")]
    [InlineData(new[] { "--stop-after-safesends", "-1" }, "--stop-after-safesends is 0 (never) or more")]
    [InlineData(new[] { "joiner-cost", "--entries", "100", "--tail", "50" }, "--tail is at least 1 and below half of --entries")]
    [InlineData(new[] { "joiner-cost", "--suspicion-count", "2" }, "--suspicion-count is 3 to 1000")]
    [InlineData(new[] { "joiner-cost", "--bogus" }, "unknown joiner-cost argument --bogus")]
    public async Task A_bad_value_exits_with_2_and_names_the_option(string[] args, string expected)
    {
        var (exitCode, log) = await DotnetTool.RunToExit([Dll(), .. args], Limit);
        Assert.True(exitCode == 2, $"exit code {exitCode}:\n{log}");
        Assert.Contains(expected, log);
    }
}
