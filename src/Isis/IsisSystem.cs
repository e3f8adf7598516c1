namespace Isis;

/// <summary>
/// The default runtime, for Isis2-style programs: <c>IsisSystem.Start(); var g = new Group("x"); ...</c>.
/// This is the only static state in the library; everything else lives in an <see cref="IsisRuntime"/>.
/// </summary>
public static class IsisSystem
{
    private static readonly object Gate = new();
    private static IsisRuntime? _default;

    /// <summary>The default runtime.</summary>
    /// <exception cref="IsisException">The default runtime has not been started.</exception>
    public static IsisRuntime Runtime => _default ?? throw ExceptionFactory.NotStarted();

    /// <summary>True while the default runtime runs.</summary>
    public static bool IsRunning => _default?.IsRunning == true;

    /// <summary>Starts the default runtime. With no options, processes on this machine find each other on loopback.</summary>
    /// <param name="options">Settings; null for the defaults.</param>
    /// <exception cref="InvalidOperationException">The default runtime is already started.</exception>
    public static void Start(IsisOptions? options = null)
    {
        lock (Gate)
        {
            if (_default != null) throw new InvalidOperationException("IsisSystem is already started; call IsisSystem.Shutdown() first to restart it.");
            var runtime = new IsisRuntime(options);
            runtime.Start();
            _default = runtime;
        }
    }

    /// <summary>Leaves every group and stops the default runtime. Does nothing if it is not started.</summary>
    public static void Shutdown()
    {
        IsisRuntime? runtime;
        lock (Gate)
        {
            runtime = _default;
            _default = null;
        }
        runtime?.Shutdown();
    }
}
