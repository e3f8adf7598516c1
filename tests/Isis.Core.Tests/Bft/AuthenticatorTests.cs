using Isis.Core.Bft;

namespace Isis.Core.Tests.Bft;

/// <summary>The MAC authenticators of BFT messages: each receiver checks its own tag; nobody else can make one.</summary>
public sealed class AuthenticatorTests
{
    private static readonly byte[] SystemKey = Enumerable.Range(1, 32).Select(i => (byte)i).ToArray();

    /// <summary>A deployment of one service of ten replicas: principals 0 to 9.</summary>
    private static readonly BftDeployment Deployment = Ten();

    private static BftDeployment Ten()
    {
        var d = new BftDeployment();
        d.AddService("s", [.. Enumerable.Range(0, 10).Select(i => (ulong)(100 + i))]);
        return d;
    }

    private static BftKeys Keys(int principal, byte[]? master = null) => BftKeys.Derive(master ?? SystemKey, Deployment, principal);

    [Fact]
    public void Every_addressed_receiver_opens_the_message_and_no_other_principal_does()
    {
        var sender = Keys(0);
        byte[] packet = BftWire.Seal(sender, BftKind.Prepare, BftWire.Vote(3, 9, new byte[32]), [1, 2, 3]);
        foreach (int receiver in new[] { 1, 2, 3 })
        {
            Assert.True(BftWire.TryOpen(Keys(receiver), packet, out BftKind kind, out int from, out ReadOnlySpan<byte> body));
            Assert.Equal(BftKind.Prepare, kind);
            Assert.Equal(0, from);
            Assert.True(BftWire.TryReadVote(body, out long view, out long seq, out _));
            Assert.Equal((3, 9), (view, seq));
        }
        Assert.False(BftWire.TryOpen(Keys(4), packet, out _, out _, out _)); // not addressed to it
    }

    [Fact]
    public void A_changed_body_a_claimed_sender_or_another_systems_key_fails_the_tag()
    {
        var sender = Keys(0);
        byte[] packet = BftWire.Seal(sender, BftKind.Commit, BftWire.Vote(0, 1, new byte[32]), [1]);
        var receiver = Keys(1);
        Assert.True(BftWire.TryOpen(receiver, packet, out _, out _, out _));

        byte[] altered = (byte[])packet.Clone();
        altered[20] ^= 1; // inside the body
        Assert.False(BftWire.TryOpen(receiver, altered, out _, out _, out _));

        byte[] claimed = (byte[])packet.Clone();
        claimed[2] = 2; // the sender field says principal 2: principal 0's tag does not verify as 2's
        Assert.False(BftWire.TryOpen(receiver, claimed, out _, out _, out _));

        byte[] otherKey = Enumerable.Repeat((byte)7, 32).ToArray();
        Assert.False(BftWire.TryOpen(Keys(1, otherKey), packet, out _, out _, out _));

        Assert.False(BftWire.TryOpen(receiver, packet.AsSpan(0, packet.Length - 1), out _, out _, out _)); // truncated
    }

    [Fact]
    public void A_pair_shares_one_key_whichever_side_derives_it()
    {
        Span<byte> digest = stackalloc byte[32];
        digest.Fill(5);
        Span<byte> tag = stackalloc byte[BftKeys.TagSize];
        Keys(4).Tag(9, digest, tag);
        Assert.True(Keys(9).Verify(4, digest, tag));
        Assert.False(Keys(9).Verify(5, digest, tag));
        Assert.False(Keys(8).Verify(4, digest, tag));
    }

    [Fact]
    public void A_replicas_signature_verifies_everywhere_and_nobody_else_can_make_it()
    {
        byte[] data = [1, 2, 3, 4];
        byte[] signature = Keys(2).Sign(data);
        Assert.Equal(BftKeys.SignatureSize, signature.Length);
        foreach (int anyone in new[] { 0, 5, 9 }) Assert.True(Keys(anyone).VerifySignature(2, data, signature));
        Assert.False(Keys(0).VerifySignature(3, data, signature)); // not replica 3's
        Assert.False(Keys(0).VerifySignature(2, [1, 2, 3, 5], signature));
        Assert.False(Keys(0, Enumerable.Repeat((byte)7, 32).ToArray()).VerifySignature(2, data, signature)); // another deployment's
        // Derived again (another host, or a restart), the keys are the same.
        Assert.True(Keys(7).VerifySignature(2, data, Keys(2).Sign(data)));
    }
}
