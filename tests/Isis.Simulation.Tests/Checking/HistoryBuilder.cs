using Isis.Core.Identity;
using Isis.Simulation.Checking;

namespace Isis.Simulation.Tests.Checking;

/// <summary>
/// Builds small histories by hand: it tracks each process's current view and next seq so a test
/// states only what matters (who installs what, who delivers what), and every event gets its own
/// time step.
/// </summary>
internal sealed class HistoryBuilder
{
    public static readonly GroupId G = GroupId.FromName("test-group");

    private readonly Dictionary<(NodeId, GroupId), int> _view = [];
    private readonly Dictionary<(NodeId, GroupId, int), long> _seq = [];
    private long _time;

    public History History { get; }

    public HistoryBuilder(int capacity = 16) => History = new History(capacity);

    public static NodeId N(int endpoint, uint incarnation = 1) => new((ulong)endpoint, incarnation);

    public static ulong HashOf(MessageId m) =>
        (ulong)m.Seq * 0x9E3779B97F4A7C15UL ^ m.Sender.Endpoint * 0xC2B2AE3D27D4EB4FUL ^ (ulong)m.ViewId;

    private long Tick() => _time += 10;

    /// <summary>One process installs a view.</summary>
    public HistoryBuilder Install(NodeId p, int view, params NodeId[] members) => Install(p, G, view, members);

    public HistoryBuilder Install(NodeId p, GroupId g, int view, params NodeId[] members)
    {
        History.RecordViewInstall(Tick(), p, g, view, members);
        _view[(p, g)] = view;
        return this;
    }

    /// <summary>Every member installs the view (the correct-protocol case).</summary>
    public HistoryBuilder InstallAll(int view, params NodeId[] members)
    {
        foreach (NodeId m in members) Install(m, view, members);
        return this;
    }

    /// <summary>p sends in its current view and delivers its own message at once.</summary>
    public MessageId Send(NodeId p) => Send(p, G);

    public MessageId Send(NodeId p, GroupId g)
    {
        int view = _view[(p, g)];
        long seq = _seq[(p, g, view)] = _seq.GetValueOrDefault((p, g, view)) + 1;
        var m = new MessageId(p, g, view, seq);
        History.RecordSend(Tick(), m, HashOf(m));
        History.RecordDeliver(Tick(), p, view, m, HashOf(m));
        return m;
    }

    /// <summary>p issues an OrderedSend in its current view: not delivered at once, but when ordered (<see cref="DeliverOrdered"/>).</summary>
    public MessageId SendOrdered(NodeId p)
    {
        int view = _view[(p, G)];
        long seq = _seq[(p, G, view)] = _seq.GetValueOrDefault((p, G, view)) + 1;
        var m = new MessageId(p, G, view, seq);
        History.RecordSend(Tick(), m, HashOf(m), Isis.Core.Groups.MessageKind.Ordered);
        return m;
    }

    public HistoryBuilder QueryIssued(NodeId p) { History.RecordQueryIssued(Tick(), p, G); return this; }

    /// <summary>p's P2PQuery to <paramref name="addressedTo"/> completed with <paramref name="repliers"/>.</summary>
    public HistoryBuilder P2PQueryCompleted(NodeId p, int deliveryView, NodeId[] addressedTo, params NodeId[] repliers)
    {
        History.RecordQueryCompleted(Tick(), p, G, deliveryView, repliers, addressedTo);
        return this;
    }

    public HistoryBuilder QueryCompleted(NodeId p, int deliveryView, params NodeId[] repliers)
    {
        History.RecordQueryCompleted(Tick(), p, G, deliveryView, repliers);
        return this;
    }

    /// <summary>q delivers the ordered message m.</summary>
    public HistoryBuilder DeliverOrdered(NodeId q, MessageId m)
    {
        History.RecordDeliver(Tick(), q, _view.GetValueOrDefault((q, m.Group), -1), m, HashOf(m), Isis.Core.Groups.MessageKind.Ordered);
        return this;
    }

    /// <summary>p issues a CausalSend in its current view and delivers it at once (its causal predecessors are all delivered at p).</summary>
    public MessageId SendCausal(NodeId p)
    {
        int view = _view[(p, G)];
        long seq = _seq[(p, G, view)] = _seq.GetValueOrDefault((p, G, view)) + 1;
        var m = new MessageId(p, G, view, seq);
        History.RecordSend(Tick(), m, HashOf(m), Isis.Core.Groups.MessageKind.CausalSend);
        History.RecordDeliver(Tick(), p, view, m, HashOf(m), Isis.Core.Groups.MessageKind.CausalSend);
        return m;
    }

    /// <summary>p sends a SubsetSend to <paramref name="to"/> in its current view; it delivers it at once if it is a destination.</summary>
    public MessageId SendSubset(NodeId p, params NodeId[] to)
    {
        int view = _view[(p, G)];
        long seq = _seq[(p, G, view)] = _seq.GetValueOrDefault((p, G, view)) + 1;
        var m = new MessageId(p, G, view, seq);
        History.RecordSend(Tick(), m, HashOf(m), Isis.Core.Groups.MessageKind.Subset, to: to);
        if (Array.IndexOf(to, p) >= 0) DeliverSubset(p, m);
        return m;
    }

    /// <summary>q delivers the subset message m.</summary>
    public HistoryBuilder DeliverSubset(NodeId q, MessageId m)
    {
        History.RecordDeliver(Tick(), q, _view.GetValueOrDefault((q, m.Group), -1), m, HashOf(m), Isis.Core.Groups.MessageKind.Subset);
        return this;
    }

    /// <summary>q delivers the causal message m.</summary>
    public HistoryBuilder DeliverCausal(NodeId q, MessageId m)
    {
        History.RecordDeliver(Tick(), q, _view.GetValueOrDefault((q, m.Group), -1), m, HashOf(m), Isis.Core.Groups.MessageKind.CausalSend);
        return this;
    }

    /// <summary>q delivers m in whatever view q has installed (which may be wrong: that is the point of some tests).</summary>
    public HistoryBuilder Deliver(NodeId q, MessageId m, ulong? hash = null)
    {
        History.RecordDeliver(Tick(), q, _view.GetValueOrDefault((q, m.Group), -1), m, hash ?? HashOf(m));
        return this;
    }

    /// <summary>p sends and every other listed process delivers.</summary>
    public MessageId Multicast(NodeId p, params NodeId[] others)
    {
        MessageId m = Send(p);
        foreach (NodeId q in others) Deliver(q, m);
        return m;
    }

    public HistoryBuilder Crash(NodeId p) { History.RecordCrash(Tick(), p); return this; }

    public HistoryBuilder Expel(NodeId p) { History.RecordExpel(Tick(), p); return this; }

    public HistoryBuilder Leave(NodeId p) { History.RecordLeaveCompleted(Tick(), p, G); _view.Remove((p, G)); return this; }

    public HistoryBuilder JoinRequested(NodeId p) { History.RecordJoinRequested(Tick(), p, G); return this; }

    public HistoryBuilder Heal() { History.RecordHeal(Tick()); return this; }

    public HistoryBuilder End() { History.RecordEnd(Tick()); return this; }

    /// <summary>A membership replica founds the service with <paramref name="replicas"/>.</summary>
    public HistoryBuilder Founded(NodeId replica, params NodeId[] replicas) { History.RecordFounded(Tick(), replica, replicas); return this; }

    /// <summary>A replica applies the decision with hash <paramref name="hash"/> at log position <paramref name="index"/>; with <paramref name="configuration"/>, a configuration decision.</summary>
    public HistoryBuilder Decide(NodeId replica, long index, ulong hash, NodeId[]? configuration = null)
    {
        History.RecordDecide(Tick(), replica, index, hash, configuration);
        return this;
    }

    /// <summary>A leader reports position <paramref name="index"/> committed: held by <paramref name="holders"/> of <paramref name="voters"/> (the configuration at <paramref name="configurationIndex"/>).</summary>
    public HistoryBuilder Commit(NodeId leader, long index, NodeId[] holders, NodeId[] voters, long configurationIndex)
    {
        History.RecordCommit(Tick(), leader, index, holders, voters, configurationIndex);
        return this;
    }

    public CheckResult Check() => HistoryChecker.Check(History);

    public void AssertPasses()
    {
        CheckResult r = Check();
        Assert.True(r.Passed, r.ToString());
    }

    /// <summary>The history breaks <paramref name="property"/>, and no property outside <paramref name="alsoAllowed"/>.</summary>
    public void AssertViolates(string property, params string[] alsoAllowed)
    {
        CheckResult r = Check();
        Assert.True(r.Violates(property), $"expected a {property} violation; got: {r}");
        foreach (Violation v in r.Violations)
        {
            Assert.True(v.Property == property || alsoAllowed.Contains(v.Property), $"unexpected {v.Property} violation; got: {r}");
        }
    }
}
