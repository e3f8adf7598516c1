using System.Collections.Concurrent;
using System.Globalization;
using Isis.Collections;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using Npgsql;

namespace Isis.ClosedLoop;

/// <summary>Where an instance keeps the objects: the variants of the experiment behind one HTTP API.</summary>
internal interface IObjectStore
{
    /// <summary>The object's value, or null if there is no such object.</summary>
    ValueTask<double?> ReadAsync(int id, CancellationToken cancel);

    /// <summary>Sets the object; returns once a read at this instance sees it (read-your-writes).</summary>
    Task WriteAsync(int id, double value, CancellationToken cancel);

    /// <summary>Every object, by id (for the check that the instances agree).</summary>
    Task<SortedDictionary<int, double>> ReadAllAsync(CancellationToken cancel);

    /// <summary>Creates the objects 0..N-1 with their initial values (<see cref="InitialValue"/>), replacing what was there.</summary>
    Task PopulateAsync(int objects, CancellationToken cancel);

    /// <summary>How many objects this instance holds.</summary>
    Task<long> CountAsync(CancellationToken cancel);

    /// <summary>Whether the instance can serve (the parent waits for every instance to be healthy).</summary>
    Task<HealthCheckResult> CheckAsync(CancellationToken cancel);
}

internal static class ObjectValues
{
    /// <summary>An object's value before any client wrote it: its id. Clients write values of a million and more.</summary>
    public static double InitialValue(int id) => id;

    public static string Format(double value) => value.ToString("R", CultureInfo.InvariantCulture);
}

/// <summary>The variants (<c>--store</c>) and what the parent must know of each.</summary>
internal static class StoreNames
{
    public const string Postgres = "postgres";
    public const string Replicated = "replicated";
    public const string Floor = "floor";

    public static readonly string[] All = [Postgres, Replicated, Floor];

    /// <summary>
    /// Whether the instances serve one set of objects (a write at one is read at the others). False
    /// for the floor only: each of its instances keeps objects of its own, so the parent populates
    /// every instance and does not check that they agree.
    /// </summary>
    public static bool SharesState(string store) => store != Floor;
}

/// <summary>
/// The three-tier baseline: a stateless instance in front of PostgreSQL. One table, primary key on
/// the id; a read is one SELECT by id, a write one UPDATE by id in its own (autocommit)
/// transaction, which with synchronous_commit = on returns once its commit record is on disk.
/// Npgsql's pool holds the connections (Max Pool Size per instance); statements are prepared
/// automatically after their second use.
/// </summary>
internal sealed class PostgresStore(string connection, int poolSize) : IObjectStore, IDisposable
{
    private readonly NpgsqlDataSource _db = NpgsqlDataSource.Create(new NpgsqlConnectionStringBuilder(connection)
    {
        MaxPoolSize = poolSize,
        MaxAutoPrepare = 8,
        AutoPrepareMinUsages = 2,
        Timeout = 30,
        CommandTimeout = 30,
        ApplicationName = "isis-closedloop",
    }.ConnectionString);

    public async ValueTask<double?> ReadAsync(int id, CancellationToken cancel)
    {
        await using NpgsqlCommand cmd = _db.CreateCommand("SELECT value FROM objects WHERE id = $1");
        cmd.Parameters.Add(new NpgsqlParameter<int> { TypedValue = id });
        return await cmd.ExecuteScalarAsync(cancel) is double value ? value : null;
    }

    public async Task WriteAsync(int id, double value, CancellationToken cancel)
    {
        await using NpgsqlCommand cmd = _db.CreateCommand("UPDATE objects SET value = $2 WHERE id = $1");
        cmd.Parameters.Add(new NpgsqlParameter<int> { TypedValue = id });
        cmd.Parameters.Add(new NpgsqlParameter<double> { TypedValue = value });
        int rows = await cmd.ExecuteNonQueryAsync(cancel);
        if (rows != 1) throw new InvalidOperationException($"UPDATE of object {id} changed {rows} rows; the table is not populated");
    }

    public async Task<SortedDictionary<int, double>> ReadAllAsync(CancellationToken cancel)
    {
        var all = new SortedDictionary<int, double>();
        await using NpgsqlCommand cmd = _db.CreateCommand("SELECT id, value FROM objects");
        await using NpgsqlDataReader reader = await cmd.ExecuteReaderAsync(cancel);
        while (await reader.ReadAsync(cancel)) all[reader.GetInt32(0)] = reader.GetDouble(1);
        return all;
    }

    public async Task PopulateAsync(int objects, CancellationToken cancel)
    {
        await using NpgsqlConnection c = await _db.OpenConnectionAsync(cancel);
        foreach (string sql in (string[])[
            "DROP TABLE IF EXISTS objects",
            "CREATE TABLE objects (id integer PRIMARY KEY, value double precision NOT NULL)",
            // InitialValue(id) = id.
            string.Create(CultureInfo.InvariantCulture, $"INSERT INTO objects (id, value) SELECT g, g FROM generate_series(0, {objects - 1}) AS g"),
            "VACUUM ANALYZE objects"])
        {
            await using var cmd = new NpgsqlCommand(sql, c);
            await cmd.ExecuteNonQueryAsync(cancel);
        }
    }

    public async Task<long> CountAsync(CancellationToken cancel)
    {
        await using NpgsqlCommand cmd = _db.CreateCommand("SELECT count(*) FROM objects");
        return await cmd.ExecuteScalarAsync(cancel) is long n ? n : 0;
    }

    public async Task<HealthCheckResult> CheckAsync(CancellationToken cancel)
    {
        try
        {
            await using NpgsqlCommand cmd = _db.CreateCommand("SELECT 1");
            await cmd.ExecuteScalarAsync(cancel);
            return HealthCheckResult.Healthy("PostgreSQL answers");
        }
        catch (NpgsqlException e)
        {
            return HealthCheckResult.Unhealthy("PostgreSQL does not answer: " + e.Message);
        }
    }

    public void Dispose() => _db.Dispose();
}

/// <summary>
/// The same service on a replicated collection: every instance holds all the objects in a
/// <see cref="ReplicatedDictionary{TKey, TValue}"/> on one group that the three instances join. A
/// read is the local dictionary (the pessimistic view: the merged history); a write is SetAsync
/// then WaitForAsync, answered once the update is merged at this instance (as StockTrader's PUT).
/// </summary>
internal sealed class ReplicatedStore(int instances) : IObjectStore
{
    /// <summary>Set when the group is configured, before it joins.</summary>
    public ReplicatedDictionary<int, double> Objects { get; set; } = null!;

    public ValueTask<double?> ReadAsync(int id, CancellationToken cancel) =>
        ValueTask.FromResult(Objects.TryGetValue(id, out double value) ? value : (double?)null);

    public async Task WriteAsync(int id, double value, CancellationToken cancel)
    {
        OperationId op = await Objects.SetAsync(id, value);
        await Objects.WaitForAsync(op, cancel);
    }

    public Task<SortedDictionary<int, double>> ReadAllAsync(CancellationToken cancel) =>
        Task.FromResult(new SortedDictionary<int, double>(Objects.ToDictionary()));

    public async Task PopulateAsync(int objects, CancellationToken cancel)
    {
        // The issuer's updates merge in the order it issued them: once the last is merged here, all are.
        OperationId last = default;
        for (int id = 0; id < objects; id++) last = await Objects.SetAsync(id, ObjectValues.InitialValue(id));
        await Objects.WaitForAsync(last, cancel);
    }

    public Task<long> CountAsync(CancellationToken cancel) => Task.FromResult((long)Objects.Count);

    /// <summary>Healthy once this instance's view of the group holds every instance.</summary>
    public Task<HealthCheckResult> CheckAsync(CancellationToken cancel)
    {
        View? view = Objects?.Group.GetView();
        int members = view?.Members.Length ?? 0;
        return Task.FromResult(members >= instances
            ? HealthCheckResult.Healthy($"view {view!.ViewId} holds {members} members")
            : HealthCheckResult.Unhealthy(view == null ? "not joined yet" : $"view {view.ViewId} holds {members} of the {instances} instances"));
    }
}

/// <summary>
/// The floor, not a correct service: each instance keeps the objects in a
/// <see cref="ConcurrentDictionary{TKey, TValue}"/> of its own, neither shared nor replicated, so
/// the three instances do not agree. A read and a write are one local dictionary operation; what a
/// request costs here is what every variant pays before its store: the loopback HTTP round trip,
/// Kestrel and ASP.NET routing, and the client. No store behind this HTTP front can answer faster.
/// </summary>
internal sealed class LocalStore : IObjectStore
{
    private readonly ConcurrentDictionary<int, double> _objects = new();

    public ValueTask<double?> ReadAsync(int id, CancellationToken cancel) =>
        ValueTask.FromResult(_objects.TryGetValue(id, out double value) ? value : (double?)null);

    public Task WriteAsync(int id, double value, CancellationToken cancel)
    {
        _objects[id] = value;
        return Task.CompletedTask;
    }

    public Task<SortedDictionary<int, double>> ReadAllAsync(CancellationToken cancel) =>
        Task.FromResult(new SortedDictionary<int, double>(_objects));

    public Task PopulateAsync(int objects, CancellationToken cancel)
    {
        _objects.Clear();
        for (int id = 0; id < objects; id++) _objects[id] = ObjectValues.InitialValue(id);
        return Task.CompletedTask;
    }

    public Task<long> CountAsync(CancellationToken cancel) => Task.FromResult((long)_objects.Count);

    public Task<HealthCheckResult> CheckAsync(CancellationToken cancel) =>
        Task.FromResult(HealthCheckResult.Healthy("a local dictionary"));
}
