using System.Buffers.Binary;
using System.Diagnostics;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Isis.Core.Common;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Simulation.Checking;
using Isis.Simulation.Network;

namespace Isis.Simulation;

/// <summary>What one scale experiment runs: how many members, which seed, how they start.</summary>
internal sealed record ScaleOptions
{
    /// <summary>Processes that join the one group.</summary>
    public int Members { get; init; } = 1_000;

    public ulong Seed { get; init; }

    /// <summary>Membership replicas (1, the embedded default, or 3).</summary>
    public int Replicas { get; init; } = 1;

    /// <summary>
    /// The processes start at random times in this window (microseconds of virtual time) after the
    /// membership service has a leader; 0 starts them all at the same instant. Defaults to 100 ms.
    /// </summary>
    public long StartWindow { get; init; } = 100_000;

    /// <summary>Sends each sending member multicasts once the group is formed. Defaults to 2.</summary>
    public int SendsPerMember { get; init; } = 2;

    /// <summary>
    /// How many members send (the oldest ones, by rank); 0, the default: every member. A fixed
    /// number keeps the workload the same at every group size, so what grows with the group is the
    /// protocol's own cost.
    /// </summary>
    public int Senders { get; init; }

    /// <summary>
    /// Virtual time the formed group then runs (after its messages are stable, before the kill)
    /// with each sending member Sending once every <see cref="SteadySendInterval"/>: the state a
    /// member reaches in a long run. 0, the default, skips the run.
    /// </summary>
    public long SteadyFor { get; init; }

    /// <summary>Virtual time between a sending member's Sends during <see cref="SteadyFor"/>. Defaults to 1 s.</summary>
    public long SteadySendInterval { get; init; } = 1_000_000;

    /// <summary>Chance that any one packet (data, control, heartbeat) is lost, from the first start on. Defaults to 0.</summary>
    public double LossRate { get; init; }

    /// <summary>One-way packet delay, drawn uniformly per packet from this range (microseconds). Nothing is lost.</summary>
    public long MinDelay { get; init; } = 50;

    public long MaxDelay { get; init; } = 200;

    /// <summary>Record the history and run the checker on it (costly in memory for large groups; the memory figure then includes the history).</summary>
    public bool CheckHistory { get; init; }

    /// <summary>Most virtual time any one phase may take before the experiment gives up. Defaults to 60 s.</summary>
    public long PhaseDeadline { get; init; } = 60_000_000;

    /// <summary>The number of members that send.</summary>
    public int SendingMembers => Senders <= 0 ? Members : Math.Min(Senders, Members);

    /// <summary>The protocol's options: the defaults of a real deployment (heartbeat 100 ms, 5 suspicions) unless changed.</summary>
    public ProtocolOptions Protocol { get; init; } = new();
}

/// <summary>One phase of the experiment: virtual time, wall-clock time and traffic it took.</summary>
internal readonly record struct ScalePhase(string Name, long VirtualMicros, double WallSeconds, long Packets, long Bytes);

/// <summary>The figures one scale experiment measured; times in microseconds of virtual time.</summary>
internal sealed record ScaleResult
{
    public required ScaleOptions Options { get; init; }

    /// <summary>Empty if every step completed and every check held; otherwise what went wrong.</summary>
    public required IReadOnlyList<string> Failures { get; init; }

    public bool Passed => Failures.Count == 0;

    /// <summary>Virtual time at which the membership service had a leader (0 with one replica); the processes start after it.</summary>
    public long LeaderElectedAt { get; init; }

    /// <summary>From the first start to every member having installed a view of all members.</summary>
    public long FormationTime { get; init; }

    /// <summary>From the last start to every member having installed a view of all members.</summary>
    public long FormationAfterLastStart { get; init; }

    /// <summary>The id of the first view with all members: the number of view changes that formed the group.</summary>
    public int FormedViewId { get; init; }

    /// <summary>Size of each view the group went through until it was formed, in order (batching shows here).</summary>
    public IReadOnlyList<int> ViewSizes { get; init; } = [];

    /// <summary>
    /// Managed memory per member once the group is formed: (heap after a full collection − baseline) / members.
    /// The heap is the whole process's, so the figure means something only when nothing else runs in it (as in the CLI).
    /// </summary>
    public long BytesPerMember { get; init; }

    /// <summary>
    /// The same measure once every member's messages are stable: by then every member has had a
    /// digest from every other, so each holds its full acknowledgement matrix (members x members
    /// sequence numbers), which it only fills in as digests arrive.
    /// </summary>
    public long BytesPerMemberSteady { get; init; }

    /// <summary>The same measure at the end of the run, just after the view without the killed member.</summary>
    public long BytesPerMemberAtEnd { get; init; }

    /// <summary>The same measure after <see cref="ScaleOptions.SteadyFor"/> (0 without that run).</summary>
    public long BytesPerMemberAfterSteady { get; init; }

    /// <summary>
    /// The most entries (sequence numbers and ranks) any member's acknowledgement table held: after
    /// <see cref="ScaleOptions.SteadyFor"/>, or once the messages were stable without that run.
    /// Members x members in a small group; a fixed number of rows in a large one, however long it runs.
    /// </summary>
    public long AcknowledgementEntriesMax { get; init; }

    /// <summary>Sends delivered during <see cref="ScaleOptions.SteadyFor"/>, at every member.</summary>
    public long SteadyDeliveries { get; init; }

    /// <summary>From the sends to every member having delivered every message.</summary>
    public long DeliveryTime { get; init; }

    /// <summary>Messages delivered in all (members × members × sends per member when everything arrived).</summary>
    public long Deliveries { get; init; }

    /// <summary>From the sends to every sender knowing all its messages stable (held by every member).</summary>
    public long StabilityTime { get; init; }

    /// <summary>The killed member: its rank in the formed view.</summary>
    public int KilledRank { get; init; }

    /// <summary>From the kill to the membership service committing the expulsion (failure detection).</summary>
    public long DetectionTime { get; init; }

    /// <summary>From the kill to each survivor installing the view without the killed member: min, median, max.</summary>
    public long KillToViewMin { get; init; }

    public long KillToViewMedian { get; init; }

    public long KillToViewMax { get; init; }

    /// <summary>From the expulsion to the last survivor installing the view without it (the view change proper).</summary>
    public long ExpelToLastView { get; init; }

    /// <summary>View changes the kill took (1 when the flush ran once).</summary>
    public int KillViewChanges { get; init; }

    public IReadOnlyList<ScalePhase> Phases { get; init; } = [];

    /// <summary>Packets per member from the sends until every message is stable: sent plus arrived, the mean over all members.</summary>
    public double MessagesPacketsPerMember { get; init; }

    /// <summary>The same, the most any member that sent nothing had.</summary>
    public long MessagesPacketsMaxReceiver { get; init; }

    /// <summary>The same, the most any sending member had (with unicast its data fan-out grows with the group).</summary>
    public long MessagesPacketsMaxSender { get; init; }

    public long Packets { get; init; }

    public long Bytes { get; init; }

    public double WallSeconds { get; init; }

    /// <summary>The recorded history (null unless <see cref="ScaleOptions.CheckHistory"/>).</summary>
    public History? History { get; init; }

    /// <summary>History events recorded and checked (0 unless <see cref="ScaleOptions.CheckHistory"/>).</summary>
    public int HistoryEvents { get; init; }

    private static string Ms(long micros) => (micros / 1000.0).ToString("F1", CultureInfo.InvariantCulture) + " ms";

    private static string Num(double x) => x.ToString("N0", CultureInfo.InvariantCulture);

    /// <summary>A readable multi-line report.</summary>
    public string Summary
    {
        get
        {
            ScaleOptions o = Options;
            int n = o.Members;
            var sb = new StringBuilder();
            sb.AppendLine(CultureInfo.InvariantCulture,
                $"scale: {n} members, seed {o.Seed}, {o.Replicas} membership replica(s), starts spread over {Ms(o.StartWindow)} of virtual time, delay {o.MinDelay}-{o.MaxDelay} us, {(o.LossRate > 0 ? (o.LossRate * 100).ToString("F0", CultureInfo.InvariantCulture) + " % loss" : "no loss")}, heartbeat {Ms(o.Protocol.HeartbeatInterval)} x {o.Protocol.SuspicionCount} suspicions, " +
                $"{(n >= o.Protocol.GossipFromMembers ? $"large-group rules (gossip to {o.Protocol.GossipFanout}, stability tree of fan-out {o.Protocol.StabilityTreeFanout})" : "digests to every member")}{(o.Protocol.Multicast != null ? ", data by IP multicast" : "")}");
            if (o.Replicas > 1) sb.AppendLine(CultureInfo.InvariantCulture, $"  service leader elected at      {Ms(LeaderElectedAt)} (processes start after it)");
            sb.AppendLine(CultureInfo.InvariantCulture,
                $"  group formed                   {Ms(FormationTime)} after the first start ({Ms(FormationAfterLastStart)} after the last); {FormedViewId} view changes, view sizes {string.Join(" -> ", ViewSizes)}");
            sb.AppendLine(CultureInfo.InvariantCulture,
                $"  memory per member              {Num(BytesPerMember)} bytes once formed, {Num(BytesPerMemberSteady)} bytes once the messages are stable (digests from everyone), {Num(BytesPerMemberAtEnd)} bytes at the end{(o.CheckHistory ? " (includes the recorded history)" : "")}");
            sb.AppendLine(CultureInfo.InvariantCulture,
                $"  {o.SendingMembers} x {o.SendsPerMember} Sends delivered everywhere {Ms(DeliveryTime)} after they were sent ({Num(Deliveries)} deliveries); all stable after {Ms(StabilityTime)}");
            if (o.SteadyFor > 0)
            {
                sb.AppendLine(CultureInfo.InvariantCulture,
                    $"  then {Ms(o.SteadyFor)} with a Send a sender every {Ms(o.SteadySendInterval)}: {Num(SteadyDeliveries)} deliveries; {Num(BytesPerMemberAfterSteady)} bytes per member after it");
            }
            sb.AppendLine(CultureInfo.InvariantCulture,
                $"  acknowledgement table          at most {Num(AcknowledgementEntriesMax)} entries at a member ({AcknowledgementEntriesMax / (double)n:F1} per member of the view)");
            sb.AppendLine(CultureInfo.InvariantCulture,
                $"  packets per member until stable {Num(MessagesPacketsPerMember)} on average (sent + arrived), at most {Num(MessagesPacketsMaxReceiver)} at a member that sent nothing, at most {Num(MessagesPacketsMaxSender)} at a sender");
            sb.AppendLine(CultureInfo.InvariantCulture,
                $"  killed rank {KilledRank}: expelled after {Ms(DetectionTime)}; survivors installed the view without it after min {Ms(KillToViewMin)} / median {Ms(KillToViewMedian)} / max {Ms(KillToViewMax)} (last one {Ms(ExpelToLastView)} after the expulsion; {KillViewChanges} view change(s))");
            sb.AppendLine(CultureInfo.InvariantCulture,
                $"  traffic                        {Num(Packets)} packets ({Num((double)Packets / n)} per member), {Num(Bytes / 1e6)} MB ({Num((double)Bytes / n)} bytes per member)");
            foreach (ScalePhase p in Phases)
            {
                sb.AppendLine(CultureInfo.InvariantCulture,
                    $"    {p.Name,-10} {Ms(p.VirtualMicros),12} virtual {p.WallSeconds,8:F1} s wall {Num(p.Packets),14} packets {Num(p.Bytes / 1e6),8} MB");
            }
            sb.AppendLine(CultureInfo.InvariantCulture, $"  wall-clock time                {WallSeconds:F1} s{(HistoryEvents > 0 ? "; history of " + Num(HistoryEvents) + " events checked" : "")}");
            sb.Append(Passed ? "  result: ok" : "  result: FAILED" + Environment.NewLine + string.Join(Environment.NewLine, Failures.Select(f => "    " + f)));
            return sb.ToString();
        }
    }

    /// <summary>The figures as one JSON object on one line (times in microseconds).</summary>
    public string JsonLine()
    {
        var fields = new Dictionary<string, object>
        {
            ["members"] = Options.Members, ["seed"] = Options.Seed, ["replicas"] = Options.Replicas, ["startWindowUs"] = Options.StartWindow,
            ["passed"] = Passed, ["formationUs"] = FormationTime, ["formationAfterLastStartUs"] = FormationAfterLastStart,
            ["viewChanges"] = FormedViewId, ["viewSizes"] = ViewSizes, ["bytesPerMember"] = BytesPerMember, ["bytesPerMemberSteady"] = BytesPerMemberSteady, ["bytesPerMemberAtEnd"] = BytesPerMemberAtEnd,
            ["steadyForUs"] = Options.SteadyFor, ["bytesPerMemberAfterSteady"] = BytesPerMemberAfterSteady, ["steadyDeliveries"] = SteadyDeliveries, ["acknowledgementEntriesMax"] = AcknowledgementEntriesMax,
            ["deliveryUs"] = DeliveryTime, ["stabilityUs"] = StabilityTime, ["detectionUs"] = DetectionTime,
            ["killToViewMinUs"] = KillToViewMin, ["killToViewMedianUs"] = KillToViewMedian, ["killToViewMaxUs"] = KillToViewMax,
            ["expelToLastViewUs"] = ExpelToLastView, ["packets"] = Packets, ["packetsPerMember"] = (double)Packets / Options.Members,
            ["senders"] = Options.SendingMembers, ["sendsPerSender"] = Options.SendsPerMember, ["lossRate"] = Options.LossRate,
            ["gossipFromMembers"] = Options.Protocol.GossipFromMembers, ["multicast"] = Options.Protocol.Multicast != null,
            ["messagesPacketsPerMember"] = Math.Round(MessagesPacketsPerMember, 1), ["messagesPacketsMaxReceiver"] = MessagesPacketsMaxReceiver, ["messagesPacketsMaxSender"] = MessagesPacketsMaxSender,
            ["bytes"] = Bytes, ["wallSeconds"] = Math.Round(WallSeconds, 2),
            ["phases"] = Phases.Select(p => new Dictionary<string, object>
            {
                ["name"] = p.Name, ["virtualUs"] = p.VirtualMicros, ["wallSeconds"] = Math.Round(p.WallSeconds, 2), ["packets"] = p.Packets, ["bytes"] = p.Bytes,
            }).ToArray(),
        };
        return JsonSerializer.Serialize(fields);
    }
}

/// <summary>
/// The simulator at scale: N processes form one group on a perfect network, all send, one is
/// killed; the figures a real deployment would be measured by, in virtual time.
/// </summary>
/// <remarks>
/// The nodes are the real protocol (<see cref="ProcessNode"/>, <see cref="Isis.Core.Membership.MembershipReplica"/>)
/// with the default options; only time is virtual. Steps:
/// <list type="number">
/// <item>Wait for the membership service to have a leader (at once with one replica); start the N
/// processes at random times in <see cref="ScaleOptions.StartWindow"/>, each joining the group.</item>
/// <item>Run until every member has installed a view of all N: the formation time, and how many
/// view changes it took (joins that arrive while a change runs are folded into the next one).
/// Measure the managed heap there, against a baseline taken before any node existed.</item>
/// <item>Every member sends <see cref="ScaleOptions.SendsPerMember"/> Sends at once; run until all
/// are delivered everywhere, and until every sender knows its messages stable.</item>
/// <item>Crash one member (a random rank other than 0, the oldest) and run until every survivor has
/// installed the view without it.</item>
/// </list>
/// Every step checks its outcome (every member delivered each message once, the final view is the
/// survivors); with <see cref="ScaleOptions.CheckHistory"/> the recorded history also goes through
/// the full <see cref="HistoryChecker"/>.
/// </remarks>
internal static class ScaleExperiment
{
    private enum Phase { Forming, Sending, Steady, Killing, Done }

    public static ScaleResult Run(ScaleOptions o, Action<string>? progress = null)
    {
        if (o.Members < 2) throw new ArgumentOutOfRangeException(nameof(o), "a scale experiment needs at least 2 members");
        if (o.Replicas is not (1 or 3 or 5)) throw new ArgumentOutOfRangeException(nameof(o), "membership replicas: 1, 3 or 5");
        int n = o.Members;
        var failures = new List<string>();
        var phases = new List<ScalePhase>();
        var wall = Stopwatch.StartNew();

        long baseline = Heap();
        var scenario = new Scenario
        {
            Name = "scale", Processes = n, Replicas = o.Replicas, MessagesPerProcess = 0, Protocol = o.Protocol,
            Faults = new NetworkFaults { MinDelay = o.MinDelay, MaxDelay = o.MaxDelay, LossRate = o.LossRate },
        };
        var sim = new Simulator(o.Seed, scenario, recordHistory: o.CheckHistory);
        if (o.CheckHistory) sim.History.RecordHeal(0); // the network is perfect from the start: liveness applies
        var random = new DeterministicRandom(o.Seed ^ 0x5CA1_E5CA_1E00UL);
        GroupId group = GroupId.FromName(Simulator.GroupName);

        // What the observer tracks, per process index (endpoint - 1).
        Phase phase = Phase.Forming;
        var viewSizes = new SortedDictionary<int, int>();
        var full = new bool[n];
        int fullCount = 0;
        var delivered = new int[n];
        long deliveries = 0, wrongDeliveries = 0, steadyDeliveries = 0;
        int formedView = 0;
        NodeId victim = default;
        var killedViewAt = new long[n];
        int killedViewCount = 0, killView = 0;
        long expelledAt = -1;
        sim.Observer = (process, e) =>
        {
            int index = (int)process.Endpoint - 1;
            switch (e)
            {
                case ViewInstalled v when v.Group == group:
                    viewSizes.TryAdd(v.View.Id, v.View.Members.Length);
                    if (phase == Phase.Forming && v.View.Members.Length == n && !full[index])
                    {
                        full[index] = true;
                        fullCount++;
                    }
                    else if (phase == Phase.Killing && !v.View.Contains(victim) && killedViewAt[index] == 0)
                    {
                        killedViewAt[index] = sim.Now;
                        killedViewCount++;
                        killView = Math.Max(killView, v.View.Id);
                    }
                    break;
                case MessageDelivered d when d.Group == group:
                    if (phase == Phase.Sending && d.Kind == MessageKind.Send && d.ViewId == formedView) { delivered[index]++; deliveries++; }
                    else if (phase == Phase.Steady && d.Kind == MessageKind.Send && d.ViewId == formedView) steadyDeliveries++;
                    else wrongDeliveries++;
                    break;
                case IncarnationExpelled x when x.Node == victim && expelledAt < 0:
                    expelledAt = sim.Now;
                    break;
            }
        };

        long mark = 0, markPackets = 0, markBytes = 0;
        double markWall = 0;
        void EndPhase(string name)
        {
            phases.Add(new ScalePhase(name, sim.Now - mark, wall.Elapsed.TotalSeconds - markWall, sim.Network.Sent - markPackets, sim.Network.BytesSent - markBytes));
            mark = sim.Now;
            markPackets = sim.Network.Sent;
            markBytes = sim.Network.BytesSent;
            markWall = wall.Elapsed.TotalSeconds;
            progress?.Invoke($"  {name} done at {sim.Now / 1000.0:F1} ms virtual, {wall.Elapsed.TotalSeconds:F1} s wall");
        }
        long bytesPerMember = 0, bytesSteady = 0, bytesAtEnd = 0;
        ScaleResult Result() => new()
        {
            Options = o, Failures = failures, Phases = phases, Packets = sim.Network.Sent, Bytes = sim.Network.BytesSent,
            WallSeconds = wall.Elapsed.TotalSeconds, ViewSizes = viewSizes.Where(v => formedView == 0 || v.Key <= formedView).Select(v => v.Value).ToArray(), FormedViewId = formedView,
            BytesPerMember = bytesPerMember, BytesPerMemberSteady = bytesSteady, BytesPerMemberAtEnd = bytesAtEnd,
        };

        // 1. The service first (a real deployment's service runs before its processes), then the processes.
        if (!sim.RunUntil(o.PhaseDeadline, () => sim.Leader != null))
        {
            failures.Add("the membership service elected no leader");
            return Result();
        }
        long firstStart = sim.Now;
        long leaderAt = sim.Now;
        long lastStart = firstStart;
        for (int i = 0; i < n; i++)
        {
            long at = firstStart + random.NextInRange(0, o.StartWindow);
            lastStart = Math.Max(lastStart, at);
            sim.StartAt(i, at);
        }
        EndPhase("leader");
        progress?.Invoke($"  starting {n} processes");
        if (progress != null)
        {
            // A line every 50 ms of virtual time (reading state only: the run is the same with or without it).
            void Report()
            {
                if (phase == Phase.Done) return;
                int top = viewSizes.Count == 0 ? 0 : viewSizes.Last().Key;
                progress($"    t={sim.Now / 1000.0:F0} ms virtual, {wall.Elapsed.TotalSeconds:F1} s wall: {phase}, {fullCount}/{n} hold a full view, " +
                         $"latest view v{top} of {(top == 0 ? 0 : viewSizes[top])}, {deliveries} deliveries, {killedViewCount} without the killed, " +
                         $"{sim.Network.Sent:N0} packets, heap {GC.GetTotalMemory(false) >> 20} MB");
                sim.Schedule(sim.Now + 50_000, Report);
            }
            sim.Schedule(sim.Now + 50_000, Report);
        }

        // 2. Formation.
        if (!sim.RunUntil(firstStart + o.PhaseDeadline, () => fullCount == n))
        {
            failures.Add($"the group did not form within {o.PhaseDeadline / 1000} ms: {fullCount} of {n} members installed a view of all");
            return Result();
        }
        long formedAt = sim.Now;
        formedView = viewSizes.Last().Key;
        EndPhase("formation");
        bytesPerMember = (Heap() - baseline) / n;
        EndPhase("memory"); // the full collections take wall-clock time of their own
        if (wrongDeliveries > 0) failures.Add($"{wrongDeliveries} deliveries before anyone sent");
        wrongDeliveries = 0;

        // 3. The senders send; all must be delivered everywhere, once each.
        phase = Phase.Sending;
        long sentAt = sim.Now;
        int senders = o.SendingMembers;
        GroupView sendingView = sim.NodeOf(0)!.FindGroup(group)!.View!;
        var isSender = new bool[n];
        for (int rank = 0; rank < senders; rank++) isSender[(int)sendingView.Members[rank].Endpoint - 1] = true;
        var trafficAtSend = new long[n];
        for (int i = 0; i < n; i++) trafficAtSend[i] = Traffic(sim, i);
        for (int i = 0; i < n; i++)
        {
            if (!isSender[i]) continue;
            for (int k = 1; k <= o.SendsPerMember; k++)
            {
                var p = new byte[16];
                BinaryPrimitives.WriteUInt64LittleEndian(p, (ulong)i + 1);
                BinaryPrimitives.WriteInt32LittleEndian(p.AsSpan(8), k);
                sim.SendFrom(i, p);
            }
        }
        long expected = (long)n * senders * o.SendsPerMember;
        if (!sim.RunUntil(sentAt + o.PhaseDeadline, () => deliveries >= expected))
        {
            failures.Add($"only {deliveries} of {expected} deliveries within {o.PhaseDeadline / 1000} ms");
        }
        long deliveredAt = sim.Now;
        for (int i = 0; i < n; i++)
        {
            if (delivered[i] != senders * o.SendsPerMember) failures.Add($"member {i + 1} delivered {delivered[i]} messages, not {senders * o.SendsPerMember}");
        }
        // Stability: poll once per millisecond of virtual time (polling changes nothing in the run).
        // Nobody sends any more, so a member whose own messages are stable stays so: poll the rest.
        bool allStable = false;
        var unstable = Enumerable.Range(0, n).ToList();
        void PollStability()
        {
            unstable.RemoveAll(i => sim.NodeOf(i)?.FindGroup(group) is { UnstableOwnMessages: 0 });
            allStable = unstable.Count == 0;
            if (!allStable) sim.Schedule(sim.Now + 1_000, PollStability);
        }
        PollStability();
        if (!sim.RunUntil(sentAt + o.PhaseDeadline, () => allStable)) failures.Add("messages never became stable");
        long stableAt = sim.Now;
        long trafficSum = 0, maxReceiver = 0, maxSender = 0;
        for (int i = 0; i < n; i++)
        {
            long packets = Traffic(sim, i) - trafficAtSend[i];
            trafficSum += packets;
            if (isSender[i]) maxSender = Math.Max(maxSender, packets);
            else maxReceiver = Math.Max(maxReceiver, packets);
        }
        EndPhase("messages");
        bytesSteady = (Heap() - baseline) / n;
        EndPhase("memory");

        // 3b. A long run: the senders keep Sending, a message each per interval, every one of which must arrive everywhere.
        long bytesAfterSteady = 0;
        if (o.SteadyFor > 0)
        {
            phase = Phase.Steady;
            long steadyFrom = sim.Now;
            int rounds = (int)Math.Min(int.MaxValue, o.SteadyFor / Math.Max(1, o.SteadySendInterval));
            for (int round = 1; round <= rounds; round++)
            {
                int k = o.SendsPerMember + round;
                sim.Schedule(steadyFrom + round * o.SteadySendInterval, () =>
                {
                    for (int i = 0; i < n; i++)
                    {
                        if (!isSender[i]) continue;
                        var p = new byte[16];
                        BinaryPrimitives.WriteUInt64LittleEndian(p, (ulong)i + 1);
                        BinaryPrimitives.WriteInt32LittleEndian(p.AsSpan(8), k);
                        sim.SendFrom(i, p);
                    }
                });
            }
            long steadyExpected = (long)n * senders * rounds;
            long steadyEnd = steadyFrom + o.SteadyFor;
            if (!sim.RunUntil(steadyEnd + o.PhaseDeadline, () => sim.Now >= steadyEnd && steadyDeliveries >= steadyExpected))
            {
                failures.Add($"only {steadyDeliveries} of {steadyExpected} deliveries of the long run within {o.PhaseDeadline / 1000} ms of its end");
            }
            EndPhase("steady");
            bytesAfterSteady = (Heap() - baseline) / n;
            EndPhase("memory");
        }
        long acknowledgementEntries = 0;
        for (int i = 0; i < n; i++) acknowledgementEntries = Math.Max(acknowledgementEntries, sim.NodeOf(i)?.FindGroup(group)?.AcknowledgementEntries ?? 0);
        phase = Phase.Killing;

        // 4. Kill a member other than the oldest; every survivor must install the view without it.
        GroupView formed = sim.NodeOf(0)!.FindGroup(group)!.View!;
        int killedRank = 1 + random.Next(n - 1);
        victim = formed.Members[killedRank];
        long killedAt = sim.Now;
        sim.CrashForGood((int)victim.Endpoint - 1);
        if (!sim.RunUntil(killedAt + o.PhaseDeadline, () => killedViewCount == n - 1))
        {
            failures.Add($"only {killedViewCount} of {n - 1} survivors installed a view without the killed member within {o.PhaseDeadline / 1000} ms");
        }
        EndPhase("kill");
        phase = Phase.Done;
        var times = new List<long>();
        for (int i = 0; i < n; i++)
        {
            if (i == (int)victim.Endpoint - 1) continue;
            if (killedViewAt[i] > 0) times.Add(killedViewAt[i] - killedAt);
            GroupView? v = sim.NodeOf(i)?.FindGroup(group)?.View;
            if (v == null || v.Members.Length != n - 1 || v.Contains(victim)) failures.Add($"member {i + 1} ends in {v?.ToString() ?? "no view"}, not the {n - 1} survivors");
        }
        times.Sort();
        if (expelledAt < 0) failures.Add("the killed member was never expelled");
        if (wrongDeliveries > 0) failures.Add($"{wrongDeliveries} deliveries after the group formed that were not the Sends of the formed view");

        int historyEvents = 0;
        if (o.CheckHistory)
        {
            sim.History.RecordEnd(sim.Now);
            CheckResult check = HistoryChecker.Check(sim.History);
            historyEvents = sim.History.Count;
            failures.AddRange(check.Violations.Take(20).Select(v => "checker: " + v));
        }
        bytesAtEnd = (Heap() - baseline) / n;
        GC.KeepAlive(sim);

        return Result() with
        {
            LeaderElectedAt = leaderAt,
            FormationTime = formedAt - firstStart,
            FormationAfterLastStart = formedAt - lastStart,
            DeliveryTime = deliveredAt - sentAt,
            Deliveries = deliveries,
            StabilityTime = stableAt - sentAt,
            BytesPerMemberAfterSteady = bytesAfterSteady,
            AcknowledgementEntriesMax = acknowledgementEntries,
            SteadyDeliveries = steadyDeliveries,
            MessagesPacketsPerMember = (double)trafficSum / n,
            MessagesPacketsMaxReceiver = maxReceiver,
            MessagesPacketsMaxSender = maxSender,
            KilledRank = killedRank,
            DetectionTime = expelledAt < 0 ? 0 : expelledAt - killedAt,
            KillToViewMin = times.Count > 0 ? times[0] : 0,
            KillToViewMedian = times.Count > 0 ? times[times.Count / 2] : 0,
            KillToViewMax = times.Count > 0 ? times[^1] : 0,
            ExpelToLastView = times.Count > 0 && expelledAt >= 0 ? killedAt + times[^1] - expelledAt : 0,
            KillViewChanges = killView - formedView,
            HistoryEvents = historyEvents,
            History = o.CheckHistory ? sim.History : null,
        };
    }

    /// <summary>Packets process <paramref name="index"/> has sent and received so far.</summary>
    private static long Traffic(Simulator sim, int index) => sim.Network.SentFrom((ulong)index + 1) + sim.Network.ArrivedAt((ulong)index + 1);

    /// <summary>The managed heap after a full, compacting collection.</summary>
    private static long Heap()
    {
        GC.Collect(GC.MaxGeneration, GCCollectionMode.Forced, blocking: true, compacting: true);
        GC.WaitForPendingFinalizers();
        return GC.GetTotalMemory(forceFullCollection: true);
    }
}
