using System.Globalization;
using Npgsql;
using Isis.Tools;

namespace Isis.ClosedLoop;

/// <summary>
/// The baseline's throwaway PostgreSQL server, made and removed by postgres.sh (beside this
/// program): a cluster in a temporary directory on disk, on a free 127.0.0.1 port, fsync and
/// synchronous_commit on. A watchdog of the script removes it if this process dies first.
/// </summary>
internal sealed class PostgresServer : IDisposable
{
    private readonly string _script;
    private readonly string _directory;
    private bool _stopped;

    private PostgresServer(string script, string directory, string dataDirectory, int port, string connection)
    {
        _script = script;
        _directory = directory;
        DataDirectory = dataDirectory;
        Port = port;
        ConnectionString = connection;
    }

    public string DataDirectory { get; }
    public int Port { get; }
    public string ConnectionString { get; }

    /// <summary>The postmaster's process id (its children are the backends), or 0 if unknown.</summary>
    public int PostmasterPid =>
        File.Exists(Path.Combine(DataDirectory, "postmaster.pid"))
        && int.TryParse(File.ReadLines(Path.Combine(DataDirectory, "postmaster.pid")).FirstOrDefault(), NumberStyles.None, CultureInfo.InvariantCulture, out int pid)
            ? pid
            : 0;

    /// <summary>Starts a server, or returns why none can be had (Skipped: no PostgreSQL; Failure: it did not start).</summary>
    public static (PostgresServer? Server, string? Skipped, string? Failure) Start(int maxConnections)
    {
        string script = Path.Combine(AppContext.BaseDirectory, "postgres.sh");
        if (!File.Exists(script)) return (null, null, $"{script} is missing (it is copied beside the program by the build)");
        (int code, string output) = ToolProcess.Exec(TimeSpan.FromMinutes(10), "bash", script, "start",
            "--parent-pid", Environment.ProcessId.ToString(CultureInfo.InvariantCulture),
            "--max-connections", maxConnections.ToString(CultureInfo.InvariantCulture));
        var values = output.Split('\n').Select(l => l.Trim().Split('=', 2)).Where(kv => kv.Length == 2).ToDictionary(kv => kv[0], kv => kv[1]);
        if (code == 3)
        {
            string reason = output.Split('\n').FirstOrDefault(l => l.StartsWith("SKIP: ", StringComparison.Ordinal))?[6..] ?? output.Trim();
            return (null, reason, null);
        }
        if (code != 0 || !values.TryGetValue("PGDIR", out string? dir) || !values.TryGetValue("CONNECTION", out string? connection))
            return (null, null, $"postgres.sh start exited with {code}: {output.Trim()}");
        return (new PostgresServer(script, dir, values["PGDATA"], int.Parse(values["PGPORT"], CultureInfo.InvariantCulture), connection), null, null);
    }

    /// <summary>The settings in force that the comparison depends on, one "name = value" line each, read back from the server.</summary>
    public async Task<List<string>> SettingsAsync()
    {
        var lines = new List<string>();
        await using var db = NpgsqlDataSource.Create(ConnectionString);
        await using NpgsqlCommand cmd = db.CreateCommand(
            "SELECT name, setting, unit FROM pg_settings WHERE name IN ('server_version', 'fsync', 'synchronous_commit', 'wal_sync_method', 'full_page_writes', " +
            "'commit_delay', 'max_connections', 'shared_buffers', 'wal_buffers', 'checkpoint_timeout', 'max_wal_size') ORDER BY name");
        await using NpgsqlDataReader reader = await cmd.ExecuteReaderAsync();
        while (await reader.ReadAsync())
        {
            // pg_settings' unit is "8kB" for pages (the setting counts them) or a plain unit such as "s" or "MB".
            string unit = reader.IsDBNull(2) ? "" : char.IsDigit(reader.GetString(2)[0]) ? " x " + reader.GetString(2) : " " + reader.GetString(2);
            lines.Add($"{reader.GetString(0)} = {reader.GetString(1)}{unit}");
        }
        lines.Add($"data directory on {Machine.FileSystemOf(DataDirectory)}");
        return lines;
    }

    public void Dispose()
    {
        if (_stopped) return;
        _stopped = true;
        (int code, string output) = ToolProcess.Exec(TimeSpan.FromMinutes(1), "bash", _script, "stop", _directory);
        if (code != 0) Console.Error.WriteLine($"Isis.ClosedLoop: postgres.sh stop {_directory} exited with {code}: {output.Trim()}");
    }
}
