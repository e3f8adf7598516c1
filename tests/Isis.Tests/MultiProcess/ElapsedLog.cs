using Xunit.Abstractions;

namespace Isis.Tests.MultiProcess;

/// <summary>A test's output with the seconds since it started in front of each line, as the multi-process tests log their timelines.</summary>
internal sealed class ElapsedLog(ITestOutputHelper output)
{
    private readonly DateTime _started = DateTime.UtcNow;

    public void Write(string text)
    {
        string line = $"[{(DateTime.UtcNow - _started).TotalSeconds,7:0.000} s] {text}";
        try { output.WriteLine(line); } catch (InvalidOperationException) { /* test already finished */ }
    }
}
