using System.Collections.Concurrent;
using System.Diagnostics;

namespace Isis.Collections;

/// <summary>Options of a <see cref="RedundantQueryClient"/>.</summary>
public sealed class RedundantQueryOptions
{
    /// <summary>How many replicas each request goes to at once (the k fastest; default 2). The first answer wins.</summary>
    public int Redundancy { get; set; } = 2;

    /// <summary>How often every replica is probed to learn how fast it answers (default every second).</summary>
    public TimeSpan ProbeInterval { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>The path probed at each replica (default "/health"); any success status counts.</summary>
    public string ProbePath { get; set; } = "/health";

    /// <summary>How long a request (or a probe) may take at one replica before that replica counts as failed for it (default 5 s).</summary>
    public TimeSpan Timeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Whether an answer must be at least as fresh as what the client saw before (default
    /// <see cref="ReadFreshness.PreferFresh"/>). Freshness is read from the answers'
    /// <see cref="HistoryPosition.HeaderName"/> header; an answer without it counts as fresh.
    /// </summary>
    public ReadFreshness Freshness { get; set; } = ReadFreshness.PreferFresh;
}

/// <summary>What a <see cref="RedundantQueryClient"/> does with an answer older than what it saw before (a lagging replica's, a 404 or 409 included).</summary>
public enum ReadFreshness
{
    /// <summary>Takes the first answer that is not a failure, however old.</summary>
    Any,

    /// <summary>
    /// Takes the first answer at least as fresh as every position the client saw; a stale one is set
    /// aside while the other replicas are tried, and returned (the freshest of them) only if none is fresh.
    /// </summary>
    PreferFresh,

    /// <summary>Takes only an answer at least as fresh as every position the client saw; if no replica has one, the request fails.</summary>
    RequireFresh,
}

/// <summary>What a <see cref="RedundantQueryClient"/> knows of one replica.</summary>
/// <param name="BaseAddress">The replica.</param>
/// <param name="Latency">Its smoothed response time (probes and requests).</param>
/// <param name="Up">False after a failed request or probe, until a probe succeeds again.</param>
public sealed record ReplicaStatus(Uri BaseAddress, TimeSpan Latency, bool Up);

/// <summary>
/// Adaptive redundant querying (the Tempest papers), for a front-end that is not a group member: it
/// probes a replicated service's instances periodically, sends each read to the k that answered
/// fastest, takes the first answer, and adapts when a replica slows down or fails.
/// </summary>
/// <remarks>
/// <para>A replica's latency is a moving average of its probes and of the requests it answered. A replica
/// that fails (an error, a 5xx status, or no answer within <see cref="RedundantQueryOptions.Timeout"/>)
/// is left out until a probe succeeds; if every replica chosen for a request fails, the others are
/// tried before the request fails. Reads only: a request is sent several times.</para>
/// <para>Session guarantee (Tempest): answers carry the positions in the collections' histories they
/// were made at (<see cref="HistoryPosition"/>). The client keeps the latest it saw of each collection
/// and, by <see cref="RedundantQueryOptions.Freshness"/>, prefers or requires answers at least that
/// fresh, so a replica that lags cannot take a read back in time, nor answer 404 or 409 for what the
/// client already saw. <see cref="NoteSeen"/> adds a write's position (read your writes).</para>
/// </remarks>
public sealed class RedundantQueryClient : IDisposable
{
    private const double Smoothing = 0.3;
    private static readonly TimeSpan Unknown = TimeSpan.FromMilliseconds(50); // assumed until measured

    private readonly HttpClient _http;
    private readonly RedundantQueryOptions _options;
    private readonly Replica[] _replicas;
    private readonly Timer _probes;
    private readonly CancellationTokenSource _stopping = new();
    private readonly ConcurrentDictionary<string, long> _seen = new(StringComparer.Ordinal);

    private sealed class Replica(Uri baseAddress)
    {
        public readonly Uri BaseAddress = baseAddress;
        public double LatencyMs = Unknown.TotalMilliseconds;
        public volatile bool Up = true;
    }

    /// <summary>A client of the replicas at <paramref name="replicas"/>.</summary>
    /// <param name="replicas">The instances' base addresses (for example http://10.0.0.1:5001/).</param>
    /// <param name="options">Redundancy, probing and timeout.</param>
    /// <param name="handler">The HTTP handler to use (default: a new <see cref="SocketsHttpHandler"/>); disposed with the client.</param>
    /// <exception cref="ArgumentException">No replica, or a redundancy below 1.</exception>
    public RedundantQueryClient(IEnumerable<Uri> replicas, RedundantQueryOptions? options = null, HttpMessageHandler? handler = null)
    {
        ArgumentNullException.ThrowIfNull(replicas);
        _options = options ?? new RedundantQueryOptions();
        _replicas = replicas.Select(r => new Replica(r)).ToArray();
        if (_replicas.Length == 0) throw new ArgumentException("A redundant query client needs the address of at least one replica.", nameof(replicas));
        if (_options.Redundancy < 1) throw new ArgumentException($"Redundancy is how many replicas each request goes to: at least 1 (it is {_options.Redundancy}).", nameof(options));
        _http = new HttpClient(handler ?? new SocketsHttpHandler(), disposeHandler: true) { Timeout = System.Threading.Timeout.InfiniteTimeSpan };
        _probes = new Timer(_ => _ = ProbeAll(), null, TimeSpan.Zero, _options.ProbeInterval);
    }

    /// <summary>What the client knows of each replica now, fastest first.</summary>
    public IReadOnlyList<ReplicaStatus> Replicas =>
        [.. _replicas.OrderBy(r => !r.Up).ThenBy(r => Volatile.Read(ref r.LatencyMs)).Select(r => new ReplicaStatus(r.BaseAddress, TimeSpan.FromMilliseconds(Volatile.Read(ref r.LatencyMs)), r.Up))];

    /// <summary>The latest position the client saw of each collection: answers older than these are stale.</summary>
    public IReadOnlyDictionary<string, long> SeenPositions => new Dictionary<string, long>(_seen, StringComparer.Ordinal);

    /// <summary>
    /// Raises what the client has seen to <paramref name="position"/>: for example a write's, from the
    /// <see cref="HistoryPosition.HeaderName"/> header of the answer of the instance that took it, so
    /// later reads see the write (read your writes).
    /// </summary>
    /// <param name="position">A collection's position, as a service sent it.</param>
    public void NoteSeen(HistoryPosition position)
    {
        ArgumentNullException.ThrowIfNull(position.Collection, nameof(position));
        _seen.AddOrUpdate(position.Collection, position.Length, (_, seen) => Math.Max(seen, position.Length));
    }

    /// <summary>GETs <paramref name="pathAndQuery"/> from the k fastest replicas and returns the first successful answer's body.</summary>
    /// <param name="pathAndQuery">Relative to each replica's base address.</param>
    /// <param name="cancellationToken">Gives up.</param>
    /// <exception cref="HttpRequestException">Every replica failed; the message lists why.</exception>
    public async Task<string> GetStringAsync(string pathAndQuery, CancellationToken cancellationToken = default)
    {
        using HttpResponseMessage response = await SendAsync(baseAddress => new HttpRequestMessage(HttpMethod.Get, new Uri(baseAddress, pathAndQuery)), cancellationToken).ConfigureAwait(false);
        return await response.Content.ReadAsStringAsync(cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// Sends the request <paramref name="request"/> makes for a replica to the k fastest replicas and
    /// returns the first answer that is not a failure (the others are cancelled); if they all fail,
    /// the remaining replicas are tried, fastest first.
    /// </summary>
    /// <param name="request">Makes the request for one replica's base address (called once per replica tried).</param>
    /// <param name="cancellationToken">Gives up.</param>
    /// <exception cref="HttpRequestException">Every replica failed; the message lists why.</exception>
    public async Task<HttpResponseMessage> SendAsync(Func<Uri, HttpRequestMessage> request, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(request);
        Replica[] ranked = [.. _replicas.OrderBy(r => !r.Up).ThenBy(r => Volatile.Read(ref r.LatencyMs))];
        var failures = new List<string>();
        HttpResponseMessage? freshestStale = null;
        long freshestStaleBehind = long.MaxValue;
        bool anyStale = false;
        try
        {
            for (int first = 0; first < ranked.Length; first += _options.Redundancy)
            {
                Replica[] round = ranked.Skip(first).Take(_options.Redundancy).ToArray();
                using var losers = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
                var attempts = round.Select(r => Attempt(r, request(r.BaseAddress), losers.Token)).ToList();
                while (attempts.Count > 0)
                {
                    Task<(HttpResponseMessage? Response, string? Failure)> done = await Task.WhenAny(attempts).ConfigureAwait(false);
                    attempts.Remove(done);
                    (HttpResponseMessage? response, string? failure) = await done.ConfigureAwait(false);
                    if (response == null)
                    {
                        failures.Add(failure!);
                        continue;
                    }
                    string? stale = null;
                    long behind = _options.Freshness == ReadFreshness.Any ? 0 : Behind(response, out stale);
                    if (behind > 0)
                    {
                        anyStale = true;
                        // A lagging replica's answer: kept aside (the least behind) while the others are tried.
                        failures.Add($"{response.RequestMessage?.RequestUri?.GetLeftPart(UriPartial.Authority)}: {(int)response.StatusCode} from {stale}");
                        if (behind < freshestStaleBehind)
                        {
                            freshestStale?.Dispose();
                            (freshestStale, freshestStaleBehind) = (response, behind);
                        }
                        else
                        {
                            response.Dispose();
                        }
                        continue;
                    }
                    await losers.CancelAsync().ConfigureAwait(false); // the slower copies are not needed
                    _ = DisposeWhenDone(attempts);
                    See(response);
                    return response;
                }
                cancellationToken.ThrowIfCancellationRequested();
            }
            if (freshestStale != null && _options.Freshness == ReadFreshness.PreferFresh)
            {
                HttpResponseMessage best = freshestStale;
                freshestStale = null;
                return best; // no replica is as fresh as what the client saw: the least stale answer
            }
        }
        finally
        {
            freshestStale?.Dispose();
        }
        throw new HttpRequestException(anyStale
            ? $"no replica answered at least as fresh as the positions this client saw ({string.Join(", ", _seen.Select(p => new HistoryPosition(p.Key, p.Value)))}): {string.Join("; ", failures)}"
            : $"every replica failed: {string.Join("; ", failures)}");
    }

    /// <summary>
    /// How far <paramref name="response"/>'s positions are behind what the client saw (summed over the
    /// collections, 0 if it is fresh or says nothing), and which of them lag, for the error message.
    /// </summary>
    private long Behind(HttpResponseMessage response, out string? stale)
    {
        stale = null;
        long behind = 0;
        var lagging = new List<string>();
        foreach (HistoryPosition p in PositionsOf(response))
        {
            if (_seen.TryGetValue(p.Collection, out long seen) && p.Length < seen)
            {
                behind += seen - p.Length;
                lagging.Add($"{p} older than {seen}");
            }
        }
        if (lagging.Count > 0) stale = string.Join(", ", lagging);
        return behind;
    }

    /// <summary>The client has seen what <paramref name="response"/> says it was made at.</summary>
    private void See(HttpResponseMessage response)
    {
        foreach (HistoryPosition p in PositionsOf(response)) NoteSeen(p);
    }

    /// <summary>The positions <paramref name="response"/>'s header carries (none if it has no such header, or one it cannot read).</summary>
    private static HistoryPosition[] PositionsOf(HttpResponseMessage response) =>
        response.Headers.TryGetValues(HistoryPosition.HeaderName, out IEnumerable<string>? values) && HistoryPosition.TryParse(string.Join(",", values), out HistoryPosition[] positions)
            ? positions
            : [];

    private static async Task DisposeWhenDone(List<Task<(HttpResponseMessage? Response, string? Failure)>> attempts)
    {
        foreach (var attempt in attempts)
        {
            (HttpResponseMessage? response, _) = await attempt.ConfigureAwait(false);
            response?.Dispose();
        }
    }

    /// <summary>One copy of a request at one replica; its latency (or failure) teaches the client about the replica.</summary>
    private async Task<(HttpResponseMessage? Response, string? Failure)> Attempt(Replica replica, HttpRequestMessage message, CancellationToken cancellationToken)
    {
        using var limit = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, _stopping.Token);
        limit.CancelAfter(_options.Timeout);
        long started = Stopwatch.GetTimestamp();
        try
        {
            HttpResponseMessage response = await _http.SendAsync(message, limit.Token).ConfigureAwait(false);
            if ((int)response.StatusCode >= 500)
            {
                Failed(replica);
                string why = $"{replica.BaseAddress}: {(int)response.StatusCode} {response.ReasonPhrase}";
                response.Dispose();
                return (null, why);
            }
            Answered(replica, Stopwatch.GetElapsedTime(started));
            return (response, null);
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            return (null, $"{replica.BaseAddress}: not needed"); // another replica answered first (or the caller gave up)
        }
        catch (Exception e) when (e is HttpRequestException or OperationCanceledException)
        {
            Failed(replica);
            return (null, $"{replica.BaseAddress}: {(e is OperationCanceledException ? $"no answer within {_options.Timeout.TotalMilliseconds:0} ms" : e.Message)}");
        }
        finally
        {
            message.Dispose();
        }
    }

    private static void Answered(Replica replica, TimeSpan took)
    {
        double old = Volatile.Read(ref replica.LatencyMs);
        // Back from a failure, it starts again from what it shows now, not from the penalty.
        Volatile.Write(ref replica.LatencyMs, replica.Up ? old + Smoothing * (took.TotalMilliseconds - old) : took.TotalMilliseconds);
        replica.Up = true;
    }

    private void Failed(Replica replica)
    {
        replica.Up = false;
        // A failed replica ranks by how long it made the caller wait, so it is tried last once back.
        Volatile.Write(ref replica.LatencyMs, Math.Max(Volatile.Read(ref replica.LatencyMs), _options.Timeout.TotalMilliseconds));
    }

    private async Task ProbeAll()
    {
        if (_stopping.IsCancellationRequested) return;
        await Task.WhenAll(_replicas.Select(async r =>
        {
            (HttpResponseMessage? response, _) = await Attempt(r, new HttpRequestMessage(HttpMethod.Get, new Uri(r.BaseAddress, _options.ProbePath)), _stopping.Token).ConfigureAwait(false);
            response?.Dispose();
        })).ConfigureAwait(false);
    }

    /// <summary>Stops probing and releases the HTTP client.</summary>
    public void Dispose()
    {
        _stopping.Cancel();
        _probes.Dispose();
        _http.Dispose();
        _stopping.Dispose();
    }
}
