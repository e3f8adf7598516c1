using Isis.Simulation.Checking;

namespace Isis.Simulation.Tests.Checking;

public sealed class SeqSetTests
{
    [Fact]
    public void Sets_whose_extras_were_absorbed_into_the_prefix_equal_sets_that_never_had_extras()
    {
        var gappy = new SeqSet();
        gappy.Add(2);
        gappy.Add(1); // 2 moves from the extras into the prefix, leaving an empty extras set
        var plain = new SeqSet();
        plain.Add(1);
        plain.Add(2);
        Assert.True(gappy.SetEquals(plain));
        Assert.True(plain.SetEquals(gappy));
    }
}
