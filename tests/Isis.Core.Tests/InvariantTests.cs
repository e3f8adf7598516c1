using Isis.Core.Common;

namespace Isis.Core.Tests;

public sealed class InvariantTests
{
    /// <summary>Counts how often it is formatted: an invariant that holds must not format its rule.</summary>
    private sealed class Counted
    {
        public int Formatted;

        public override string ToString()
        {
            Formatted++;
            return "counted";
        }
    }

    [Fact]
    public void A_check_that_holds_formats_nothing_and_one_that_fails_throws_its_rule_with_the_values()
    {
        var value = new Counted();
        for (int i = 0; i < 1000; i++) Invariant.Check(i >= 0, $"never formatted: {value} at {i}");
        Assert.Equal(0, value.Formatted);

        var e = Assert.Throws<ProtocolInvariantException>(() => Invariant.Check(value.Formatted > 0, $"formatted once: {value}, {42}"));
        Assert.Equal("Protocol invariant violated: formatted once: counted, 42", e.Message);
        Assert.Equal(1, value.Formatted);
    }

    [Fact]
    public void A_stream_delivers_in_order_only_what_it_holds()
    {
        var s = new Isis.Core.Groups.SenderStream();
        Assert.Throws<ProtocolInvariantException>(() => s.DeliverNext()); // nothing held
        s.Add(2, default);
        Assert.Throws<ProtocolInvariantException>(() => s.DeliverNext()); // 1 is missing: 2 waits
        s.Add(1, default);
        Assert.Equal(1, s.DeliverNext());
        Assert.Equal(2, s.DeliverNext());
        Assert.Throws<ProtocolInvariantException>(() => s.DeliverNext());
    }
}
