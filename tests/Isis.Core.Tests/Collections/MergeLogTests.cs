using Isis.Core.Collections;

namespace Isis.Core.Tests.Collections;

/// <summary>
/// The collections' model without I/O (MergeLog): the rules gossip repair adds, on members driven
/// by hand. The simulator drives the same class under faults (CollectionScenarioTests); these pin
/// each rule down where a seed would have to be lucky.
/// </summary>
public sealed class MergeLogTests
{
    private static readonly string[] Abc = ["a", "b", "c"];

    private sealed class Member
    {
        public readonly List<(UpdateId Id, int Op)> Applied = new();
        public readonly MergeLog<int> Log;

        public Member(string name, int viewId, string[] members)
        {
            Log = new MergeLog<int>((id, op) => Applied.Add((id, op)));
            Log.OnView(viewId, members, Array.IndexOf(members, name));
        }
    }

    private static UpdateId Id(string issuer, long seq, int firstView = 1) => new($"{issuer}/{firstView}", seq);

    [Fact]
    public void A_repair_hands_over_only_what_every_other_member_already_holds()
    {
        Member a = new("a", 1, Abc), b = new("b", 1, Abc), c = new("c", 1, Abc);
        // a (the sequencer) and b merged two updates; c trails. The list of a third reached a alone.
        foreach (Member m in new[] { a, b, c })
        {
            m.Log.OnUpdate(Id("a", 1), 1);
            m.Log.OnUpdate(Id("a", 2), 2);
        }
        foreach (Member m in new[] { a, b }) m.Log.OnMerge(1, [Id("a", 1), Id("a", 2)]);
        a.Log.OnUpdate(Id("a", 3), 3);
        a.Log.OnMerge(1, [Id("a", 3)]);
        Assert.Equal(3, a.Log.History.Length);

        // c pulls from a before a knows how far b got: a hands over nothing (b might not hold it).
        c.Log.OnPullReply("a", a.Log.AnswerPull("c", c.Log.MakePull(), 64));
        Assert.True(c.Log.Trailing);
        PullReply<int> early = a.Log.AnswerPull("c", c.Log.MakePull(), 64);
        Assert.Empty(early.Ids);

        // b tells a its length: then a hands over the two b holds, never the third (only a has it:
        // if a failed now, the survivors could merge another update there).
        a.Log.OnPullReply("b", b.Log.AnswerPull("a", a.Log.MakePull(), 64));
        PullReply<int> reply = a.Log.AnswerPull("c", c.Log.MakePull(), 64);
        Assert.Equal([Id("a", 1), Id("a", 2)], reply.Ids);
        RepairOutcome outcome = c.Log.OnPullReply("a", reply);
        Assert.Equal(2, outcome.Gained);
        Assert.Equal(b.Applied, c.Applied);

        // c's own deliveries of those updates and their list come late: dropped as duplicates.
        c.Log.OnMerge(1, [Id("a", 1), Id("a", 2)]);
        Assert.Equal(2, c.Log.History.Length);
        Assert.Equal(2, c.Log.LateDuplicates); // the list's two entries (their updates were pending, and the repair took them)
        Assert.Equal(0, c.Log.PendingCount);
    }

    [Fact]
    public void Lengths_heard_in_gossip_spread_to_members_that_never_talked()
    {
        Member a = new("a", 1, Abc), b = new("b", 1, Abc), c = new("c", 1, Abc);
        foreach (Member m in new[] { a, b, c }) m.Log.OnUpdate(Id("b", 1), 10);
        foreach (Member m in new[] { a, b }) m.Log.OnMerge(1, [Id("b", 1)]);
        // b tells a its length; a tells c in passing (c learns b's length without ever asking b).
        a.Log.OnPullReply("b", b.Log.AnswerPull("a", a.Log.MakePull(), 64));
        PullRequest fromC = c.Log.MakePull();
        c.Log.OnPullReply("a", a.Log.AnswerPull("c", fromC, 64));
        Assert.Contains(c.Log.MakePull().Heard, h => h is { Member: "b", Length: 1 });
    }

    [Fact]
    public void A_member_a_repair_carried_past_what_a_view_left_merges_the_rest_as_everyone_does()
    {
        Member a = new("a", 1, Abc), b = new("b", 1, Abc), c = new("c", 1, Abc);
        // Three updates pending everywhere, never listed: the view change merges them in id order.
        foreach (Member m in new[] { a, b, c })
        {
            m.Log.OnUpdate(Id("c", 1), 30);
            m.Log.OnUpdate(Id("b", 1), 20);
            m.Log.OnUpdate(Id("a", 1), 10);
        }
        a.Log.OnView(2, Abc, 0);
        b.Log.OnView(2, Abc, 1);
        Assert.Equal([Id("a", 1), Id("b", 1), Id("c", 1)], a.Applied.Select(x => x.Id));

        // c still handles view 1 (its handlers trail); gossip brings it the first of the merge.
        a.Log.OnPullReply("b", b.Log.AnswerPull("a", a.Log.MakePull(), 64));
        c.Log.OnPullReply("a", a.Log.AnswerPull("c", c.Log.MakePull(), 64)); // learns it trails
        RepairOutcome outcome = c.Log.OnPullReply("a", a.Log.AnswerPull("c", c.Log.MakePull(), 1));
        Assert.Equal(1, outcome.Gained);
        // Its handlers reach the view change: it merges the rest from there, in the same order.
        c.Log.OnView(2, Abc, 2);
        Assert.Equal(a.Applied, c.Applied);
        Assert.Equal(a.Log.History.Chain, c.Log.History.Chain);
    }

    [Fact]
    public void A_process_that_joins_again_issues_under_a_new_name_and_a_repair_ahead_keeps_its_issuer()
    {
        // d was in view 1, left in view 2, and joined again in view 3 with a new collection.
        Member a = new("a", 1, ["a", "d"]);
        a.Log.OnUpdate(Id("d", 5, firstView: 1), 1);
        a.Log.OnMerge(1, [Id("d", 5, firstView: 1)]);
        var d = new MergeLog<int>((_, _) => { });
        d.NoteView("d", 3);
        Assert.Equal("d/3", d.Issuer);

        // a trails at view 1: a repair brings the new d's first update (from view 3) ahead of time.
        var reply = new PullReply<int>(2, true, 0, 1, [Id("d", 1, firstView: 3)], [7], []);
        a.Log.OnPullReply("x", reply);
        // a's handlers reach view 2, which d left: the old d's name goes, the new one's stays...
        a.Log.OnView(2, ["a"], 0);
        a.Log.OnView(3, ["a", "d"], 0);
        // ...so the new d's update, delivered late in view 3, is a duplicate, not a second entry.
        Assert.False(a.Log.OnUpdate(Id("d", 1, firstView: 3), 7)); // (a new update would start the sequencer's next list)
        Assert.Equal(1, a.Log.LateDuplicates);
        Assert.Equal(0, a.Log.PendingCount);
        Assert.Equal(2, a.Log.History.Length);
    }

    [Fact]
    public void Members_whose_chains_differ_at_one_position_are_told_apart_and_nothing_is_repaired_over()
    {
        Member a = new("a", 1, Abc), c = new("c", 1, Abc);
        a.Log.OnUpdate(Id("a", 1), 1);
        a.Log.OnMerge(1, [Id("a", 1)]);
        c.Log.OnUpdate(Id("b", 1), 2);
        c.Log.OnMerge(1, [Id("b", 1)]);
        RepairOutcome outcome = c.Log.OnPullReply("a", a.Log.AnswerPull("c", c.Log.MakePull(), 64));
        Assert.NotNull(outcome.Divergence);
        Assert.Equal(0, outcome.Gained);
        Assert.Equal([Id("b", 1)], c.Applied.Select(x => x.Id));
    }

    [Fact]
    public void An_update_of_an_issuer_that_left_stays_applied_and_one_it_never_ordered_is_lost()
    {
        Member a = new("a", 1, Abc);
        a.Log.OnUpdate(Id("c", 1), 1);
        a.Log.OnMerge(1, [Id("c", 1)]);
        a.Log.OnUpdate(Id("c", 2), 2); // pending when c goes: the view's end merges it
        Assert.Equal(UpdateFate.Applied, a.Log.Fate(Id("c", 1)));
        Assert.Equal(UpdateFate.Pending, a.Log.Fate(Id("c", 3)));

        a.Log.OnView(2, ["a", "b"], 0); // c left
        Assert.Equal(UpdateFate.Applied, a.Log.Fate(Id("c", 1)));
        Assert.Equal(UpdateFate.Applied, a.Log.Fate(Id("c", 2)));
        Assert.Equal(UpdateFate.Lost, a.Log.Fate(Id("c", 3))); // no survivor received it: it never will be in the history
        Assert.Equal(UpdateFate.Pending, a.Log.Fate(Id("b", 1))); // b is a member: it may still issue it
        Assert.Equal(UpdateFate.Pending, a.Log.Fate(Id("e", 1, firstView: 5))); // from a view a has not reached
        Assert.Equal(UpdateFate.Unknown, a.Log.Fate(Id("e", 1, firstView: 2))); // never a member here
        // What a view leaves is merged in id order: issuer, then sequence number (numerically).
        Assert.True(Id("c", 2).CompareTo(Id("c", 10)) < 0);
        Assert.True(Id("b", 10).CompareTo(Id("c", 2)) < 0);

        // A joiner's checkpoint carries it: the joiner answers as a does.
        var joiner = new MergeLog<int>((_, _) => { });
        joiner.Load(a.Log.History.Length, a.Log.History.Chain);
        joiner.LoadIssuers(a.Log.SaveIssuers());
        joiner.OnView(3, ["a", "b", "j"], 2);
        Assert.Equal(UpdateFate.Applied, joiner.Fate(Id("c", 2)));
        Assert.Equal(UpdateFate.Lost, joiner.Fate(Id("c", 3)));
    }

    [Fact]
    public void A_member_remembers_the_latest_retired_issuers_only()
    {
        Member a = new("a", 1, ["a"]);
        int view = 1;
        for (int n = 0; n < MergeLog<int>.RetiredIssuersKept + 10; n++)
        {
            string issuer = "p" + n;
            a.Log.OnView(++view, ["a", issuer], 0);
            UpdateId id = new($"{issuer}/{view}", 1);
            a.Log.OnUpdate(id, n);
            a.Log.OnMerge(view, [id]);
            a.Log.OnView(++view, ["a"], 0);
        }
        Assert.Equal(UpdateFate.Unknown, a.Log.Fate(new UpdateId("p0/2", 1))); // forgotten: the oldest 10
        Assert.Equal(UpdateFate.Applied, a.Log.Fate(new UpdateId("p10/22", 1)));
        Assert.Equal(MergeLog<int>.RetiredIssuersKept, a.Log.SaveIssuers().Retired.Length);
    }
}
