using Microsoft.Extensions.Logging;

namespace Isis.Diagnostics;

/// <summary>
/// The runtime's logger when the application configured none: warnings, errors and critical
/// events go to standard error, one line each ("isis: warn: ..."), so that what goes wrong
/// (undeliverable messages, handler exceptions, hostile input, shutdowns) is never silent.
/// Information and below are dropped, as a console program would want.
/// </summary>
/// <remarks>
/// A few lines of our own rather than Microsoft.Extensions.Logging.Console: the library depends on
/// the logging abstractions only, and the console provider brings its own options, formatters and
/// a background queue that an application which configured no logging did not ask for.
/// </remarks>
/// <param name="output">Where to write (tests); null: whatever <see cref="Console.Error"/> is at the time of writing.</param>
internal sealed class StandardErrorLogger(TextWriter? output) : ILogger
{
    private readonly Lock _gate = new();

    public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;

    public bool IsEnabled(LogLevel logLevel) => logLevel >= LogLevel.Warning && logLevel != LogLevel.None;

    public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
    {
        if (!IsEnabled(logLevel)) return;
        string level = logLevel switch { LogLevel.Warning => "warn", LogLevel.Error => "error", _ => "critical" };
        string line = $"isis: {level}: {formatter(state, exception)}";
        if (exception != null) line += Environment.NewLine + exception;
        TextWriter writer = output ?? Console.Error;
        lock (_gate)
        {
            writer.WriteLine(line);
            writer.Flush();
        }
    }
}
