using Isis.Simulation.Bft;

namespace Isis.Simulation.Tests.Bft;

/// <summary>The simulator's "bft" command: what a user types to run seeds of a faulty service.</summary>
public sealed class BftCommandTests
{
    private static (int Code, string Output) Run(params string[] args)
    {
        var output = new StringWriter();
        string? Option(string name)
        {
            int i = Array.IndexOf(args, name);
            return i >= 0 && i + 1 < args.Length ? args[i + 1] : null;
        }
        return (BftCommand.Run(args, Option, output), output.ToString());
    }

    [Fact]
    public void Seeds_with_a_faulty_replica_each_print_their_outcome_and_a_total()
    {
        (int code, string output) = Run("bft", "--seeds", "3..5", "--faulty", "0:Equivocate", "--requests", "10");
        Assert.Equal(0, code);
        Assert.Contains("seed 3: ok, 20/20 answered", output);
        Assert.Contains("seed 5: ok", output);
        Assert.Contains("3 passed, 0 failed", output);
    }

    [Fact]
    public void A_mutation_fails_the_run_and_prints_the_violation()
    {
        (int code, string output) = Run("bft", "--seeds", "0..3", "--faulty", "1:WrongReplies", "--mutation", "ReplyOnFMatches", "--requests", "10");
        Assert.Equal(1, code);
        Assert.Contains("FAILED", output);
        Assert.Contains("replies: client", output);
    }

    [Fact]
    public void Two_tiers_and_a_bad_option_say_what_they_did_or_what_to_fix()
    {
        (int code, string output) = Run("bft", "--seeds", "1..1", "--tiers", "2", "--target-faulty", "2:Silent", "--requests", "5");
        Assert.Equal(0, code);
        Assert.Contains("10/10 answered", output);
        Assert.Contains("Behaviours:", Assert.Throws<ArgumentException>(() => Run("bft", "--faulty", "0:Sleepy")).Message);
        Assert.Contains("known:", Assert.Throws<ArgumentException>(() => Run("bft", "--mutation", "Nope")).Message);
    }
}
