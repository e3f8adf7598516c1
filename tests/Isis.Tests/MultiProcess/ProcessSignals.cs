using System.Diagnostics;
using System.Runtime.InteropServices;

namespace Isis.Tests.MultiProcess;

/// <summary>SIGSTOP and SIGCONT for a child process: a frozen process holds its sockets and answers nothing, as under a long pause or a debugger.</summary>
internal static class ProcessSignals
{
    private const int SigCont = 18; // Linux numbering (x86-64 and arm64)
    private const int SigStop = 19;

    public static void Stop(Process process) => Signal(process, SigStop);

    public static void Continue(Process process) => Signal(process, SigCont);

    private static void Signal(Process process, int signal)
    {
        if (process.HasExited) return;
        if (SysKill(process.Id, signal) != 0)
            throw new InvalidOperationException($"kill({process.Id}, {signal}) failed: errno {Marshal.GetLastPInvokeError()}");
    }

    [DllImport("libc", EntryPoint = "kill", SetLastError = true)]
    private static extern int SysKill(int pid, int signal);
}
