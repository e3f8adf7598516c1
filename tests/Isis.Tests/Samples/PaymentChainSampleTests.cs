namespace Isis.Tests.Samples;

/// <summary>The README's payment-chain command keeps working: twelve replica processes and the ASP.NET front end, orders over HTTP, each service's primary killed, exit 0.</summary>
public sealed class PaymentChainSampleTests
{
    [Fact]
    public void PaymentChain_answers_every_order_rightly_before_and_after_each_primary_is_killed()
    {
        (int exitCode, string text) = SampleProgram.RunToTheEnd("PaymentChain", TimeSpan.FromSeconds(120));
        Assert.True(exitCode == 0, "PaymentChain failed:\n" + text);
        Assert.Contains("12 processes", text);
        Assert.Contains("alice orders 2 book: accepted (charged, authorization A", text);
        Assert.Contains("declined by the bank: insufficient funds", text);
        Assert.Contains("killing store[0], gateway[0] and bank[0] with SIGKILL", text);
        Assert.Contains("stock: book 5, lamp 0, piano 1", text);
        Assert.Contains("PaymentChain: done", text);
        Assert.DoesNotContain("UNEXPECTED", text);
    }
}
