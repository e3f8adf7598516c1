using System.Net;
using System.Net.Sockets;
using System.Text;

namespace Isis.Runtime;

/// <summary>
/// The embedded membership service's replicas as the processes of this machine last knew them, in
/// a small file every process rewrites when the service reconfigures. A newcomer asks these
/// replicas (besides the well-known port) where the service is, and decides from them whether the
/// service may still be alive or must be founded afresh.
/// </summary>
/// <remarks>
/// The file is only a hint: a process trusts nothing in it until a replica or a process answers.
/// Writes go to a temporary file that replaces the old one, so a reader never sees half a file; a
/// damaged or foreign file reads as empty.
/// </remarks>
internal static class ServiceDirectoryFile
{
    private const string Magic = "isis-embedded-service-replicas 1";

    /// <summary>The configuration version and replicas the file holds (version -1 and none if there is no usable file).</summary>
    public static (long Version, IPEndPoint[] Replicas) Read(string path)
    {
        try
        {
            string[] lines = File.ReadAllLines(path);
            if (lines.Length < 2 || lines[0] != Magic || !long.TryParse(lines[1], out long version) || version < 0) return (-1, []);
            var replicas = new List<IPEndPoint>();
            foreach (string line in lines.Skip(2))
            {
                if (!IPEndPoint.TryParse(line, out IPEndPoint? e) || e.AddressFamily != AddressFamily.InterNetwork || e.Port == 0) return (-1, []);
                replicas.Add(e);
            }
            return (version, replicas.ToArray());
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return (-1, []);
        }
    }

    /// <summary>
    /// Records the replicas of configuration <paramref name="version"/>, unless the file already
    /// holds a later one (<paramref name="force"/>: a new service was founded, whose numbering
    /// starts again). Failures to write are returned, not thrown: the file only speeds discovery up.
    /// </summary>
    public static string? Write(string path, long version, IEnumerable<IPEndPoint> replicas, bool force)
    {
        try
        {
            if (!force && Read(path).Version >= version) return null;
            Directory.CreateDirectory(Path.GetDirectoryName(path)!);
            var text = new StringBuilder().AppendLine(Magic).AppendLine(version.ToString(System.Globalization.CultureInfo.InvariantCulture));
            foreach (IPEndPoint r in replicas) text.AppendLine(r.ToString());
            string temporary = $"{path}.{Environment.ProcessId}.{Environment.CurrentManagedThreadId}.tmp";
            File.WriteAllText(temporary, text.ToString());
            File.Move(temporary, path, overwrite: true);
            return null;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return $"{e.GetType().Name}: {e.Message}";
        }
    }

    /// <summary>
    /// False only if <paramref name="replica"/> certainly runs nowhere: it is an address of this
    /// machine and its port is free (the process that held it is gone). A port still held, or an
    /// address of another machine, may belong to a live replica.
    /// </summary>
    public static bool MayBeAlive(IPEndPoint replica)
    {
        using var probe = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        try
        {
            probe.Bind(replica);
            return false;
        }
        catch (SocketException)
        {
            return true; // in use, or not an address of this machine
        }
    }
}
