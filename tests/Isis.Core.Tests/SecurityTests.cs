using System.Buffers.Binary;
using Isis.Core.Groups;
using Isis.Core.Identity;
using Isis.Core.Node;
using Isis.Core.Security;
using Isis.Core.Wire;

namespace Isis.Core.Tests;

/// <summary>
/// Keys (DESIGN.md section 3, security): the sealing of packets with AES-256-GCM, replay windows,
/// a group's key among its members, the system key at the membership service, and processes that
/// come without the key or with another one.
/// </summary>
public class SecurityTests
{
    private static byte[] Key(byte seed) => Enumerable.Range(0, 32).Select(i => (byte)(seed + i)).ToArray();

    private static readonly GroupId G = TestCluster.G;

    private static byte[] DataPacket(NodeId sender, int view, long seq, string text) =>
        new PacketWriter().Begin(new PacketHeader(PacketKind.Data, sender, G, view, seq)).I32(0).U8((byte)MessageKind.Send).I32(0).Tail(System.Text.Encoding.UTF8.GetBytes(text)).Finish();

    private static (PacketSealer Sender, PacketSealer Receiver, NodeId From) Pair(byte[]? senderKey, byte[]? receiverKey)
    {
        var from = new NodeId(1, 7);
        var sender = new PacketSealer(from, salt: 0x01020304, systemKey: null);
        var receiver = new PacketSealer(new NodeId(2, 9), salt: 0x0A0B0C0D, systemKey: null);
        if (senderKey != null) sender.SetGroupKey(G, senderKey);
        if (receiverKey != null) receiver.SetGroupKey(G, receiverKey);
        return (sender, receiver, from);
    }

    private static OpenVerdict Open(PacketSealer receiver, ReadOnlyMemory<byte> packet, out byte[] plain)
    {
        Assert.Equal(HeaderVerdict.Ok, PacketDecoder.TryReadHeader(packet.Span, out PacketHeader h));
        OpenVerdict v = receiver.Open(h, packet.Span, out ReadOnlySpan<byte> opened);
        plain = opened.ToArray();
        return v;
    }

    [Fact]
    public void A_sealed_packet_opens_to_the_original_and_its_body_is_not_readable_on_the_wire()
    {
        var (sender, receiver, from) = Pair(Key(1), Key(1));
        byte[] clear = DataPacket(from, 3, 1, "a secret update");
        ReadOnlyMemory<byte> onWire = sender.Seal(clear, new Outbox());
        Assert.Equal(PacketHeader.SealedVersion, onWire.Span[2]);
        Assert.Equal(-1, onWire.Span.IndexOf("secret"u8));
        Assert.Equal(OpenVerdict.Opened, Open(receiver, onWire, out byte[] plain));
        Assert.Equal(clear, plain);
    }

    [Fact]
    public void Tampering_another_key_a_clear_packet_where_a_key_is_required_and_a_sealed_one_without_a_key_are_refused()
    {
        var (sender, receiver, from) = Pair(Key(1), Key(1));
        byte[] sealedPacket = sender.Seal(DataPacket(from, 3, 1, "x"), new Outbox()).ToArray();
        // A flipped body bit, with the CRC fixed up so only the tag can tell.
        byte[] tampered = (byte[])sealedPacket.Clone();
        tampered[PacketHeader.Size] ^= 1;
        FixChecksum(tampered);
        Assert.Equal(OpenVerdict.Unauthenticated, Open(receiver, tampered, out _));
        // A header field changed (the view): it is associated data, so the tag fails too.
        byte[] otherView = (byte[])sealedPacket.Clone();
        BinaryPrimitives.WriteInt32LittleEndian(otherView.AsSpan(28), 4);
        FixChecksum(otherView);
        Assert.Equal(OpenVerdict.Unauthenticated, Open(receiver, otherView, out _));

        var (_, otherKeyReceiver, _) = Pair(Key(1), Key(2));
        Assert.Equal(OpenVerdict.Unauthenticated, Open(otherKeyReceiver, sealedPacket, out _));
        Assert.Equal(OpenVerdict.KeyRequired, Open(receiver, DataPacket(from, 3, 2, "clear"), out _));
        var (_, keylessReceiver, _) = Pair(null, null);
        Assert.Equal(OpenVerdict.NoKey, Open(keylessReceiver, sealedPacket, out _));
        // Packets of kinds no key protects stay clear.
        byte[] heartbeat = new PacketWriter().Begin(new PacketHeader(PacketKind.Heartbeat, from, default, 0, 1)).Finish();
        Assert.Equal(heartbeat, sender.Seal(heartbeat, new Outbox()).ToArray());
        Assert.Equal(OpenVerdict.Clear, Open(receiver, heartbeat, out _));
    }

    [Fact]
    public void During_a_rolling_rotation_of_the_system_key_each_side_opens_the_other_keys_packets_and_seals_only_with_its_own()
    {
        byte[] oldKey = Key(1), newKey = Key(2);
        static byte[] Heartbeat(NodeId from, long seq) => new PacketWriter().Begin(new PacketHeader(PacketKind.Heartbeat, from, default, 0, seq)).Finish();
        var a = new NodeId(1, 1);
        var b = new NodeId(2, 1);
        // Step 1 done at A (the old key, accepting the new); step 2 done at B (the new key, accepting the old).
        var stepOne = new PacketSealer(a, 1, oldKey, acceptedSystemKeys: [newKey]);
        var stepTwo = new PacketSealer(b, 2, newKey, acceptedSystemKeys: [oldKey]);
        var oldOnly = new PacketSealer(new NodeId(3, 1), 3, oldKey);
        var newOnly = new PacketSealer(new NodeId(4, 1), 4, newKey);

        byte[] fromA = stepOne.Seal(Heartbeat(a, 1), new Outbox()).ToArray();
        byte[] fromB = stepTwo.Seal(Heartbeat(b, 1), new Outbox()).ToArray();
        Assert.Equal(OpenVerdict.Opened, Open(stepTwo, fromA, out byte[] plain));
        Assert.Equal(Heartbeat(a, 1), plain);
        Assert.Equal(OpenVerdict.Opened, Open(stepOne, fromB, out _));
        // Each seals with its own key only: a process that holds only the old key opens A's, not B's.
        Assert.Equal(OpenVerdict.Opened, Open(oldOnly, fromA, out _));
        Assert.Equal(OpenVerdict.Unauthenticated, Open(oldOnly, fromB, out _));
        Assert.Equal(OpenVerdict.Opened, Open(newOnly, fromB, out _));
        Assert.Equal(OpenVerdict.Unauthenticated, Open(newOnly, fromA, out _));
        // An accepted key has its own replay window, and a third key opens nothing.
        Assert.Equal(OpenVerdict.Replayed, Open(stepTwo, fromA, out _));
        var stranger = new PacketSealer(new NodeId(5, 1), 5, Key(3), acceptedSystemKeys: [Key(4)]);
        Assert.Equal(OpenVerdict.Unauthenticated, Open(stranger, fromA, out _));
        Assert.Equal(OpenVerdict.Unauthenticated, Open(stranger, fromB, out _));
        // The mutation that forgets accepted keys cuts the two steps apart.
        var forgetful = new PacketSealer(b, 2, newKey, ProtocolMutations.AcceptedSystemKeysIgnored, [oldKey]);
        Assert.Equal(OpenVerdict.Unauthenticated, Open(forgetful, stepOne.Seal(Heartbeat(a, 2), new Outbox()).ToArray(), out _));
    }

    [Fact]
    public void Each_counter_is_accepted_once_in_any_order_within_the_window_and_older_ones_are_replays()
    {
        var (sender, receiver, from) = Pair(Key(1), Key(1));
        var outbox = new Outbox();
        byte[][] packets = Enumerable.Range(1, 1_100).Select(i => sender.Seal(DataPacket(from, 3, i, "m"), outbox).ToArray()).ToArray();
        // Out of order within the window: each opens once, then is a replay.
        foreach (int i in new[] { 5, 2, 9, 1 }) Assert.Equal(OpenVerdict.Opened, Open(receiver, packets[i], out _));
        foreach (int i in new[] { 5, 2, 9, 1 }) Assert.Equal(OpenVerdict.Replayed, Open(receiver, packets[i], out _));
        Assert.Equal(OpenVerdict.Opened, Open(receiver, packets[1_099], out _));
        // Counter 4 (packets[3]) is now more than 1,024 behind the highest: too old to tell, so refused.
        Assert.Equal(OpenVerdict.Replayed, Open(receiver, packets[3], out _));
        Assert.Equal(OpenVerdict.Opened, Open(receiver, packets[1_000], out _));
    }

    [Fact]
    public void A_live_members_replay_window_survives_5000_other_incarnations()
    {
        var (live, receiver, from) = Pair(Key(1), Key(1));
        long seq = 0;
        ReadOnlyMemory<byte> SealFrom(PacketSealer sealer, NodeId id) => sealer.Seal(DataPacket(id, 3, ++seq, "x"), new Outbox()).ToArray();
        byte[] captured = SealFrom(live, from).ToArray();
        Assert.Equal(OpenVerdict.Opened, Open(receiver, captured, out _));
        for (int n = 0; n < 5_000; n++)
        {
            // Incarnations come and go (each sends a few packets and falls silent); the live member talks on.
            var other = new NodeId(1_000 + (ulong)n, 1);
            var sealer = new PacketSealer(other, salt: (uint)n + 17, systemKey: null);
            sealer.SetGroupKey(G, Key(1));
            Assert.Equal(OpenVerdict.Opened, Open(receiver, SealFrom(sealer, other), out _));
            if (n % 50 == 0) Assert.Equal(OpenVerdict.Opened, Open(receiver, SealFrom(live, from), out _));
        }
        Assert.InRange(receiver.RememberedSenders(G), 1, 4_096); // bounded: the silent ones were forgotten...
        Assert.Equal(OpenVerdict.Replayed, Open(receiver, captured, out _)); // ...and the live member's window still refuses its old packet
    }

    [Fact]
    public void A_keyed_group_works_and_forged_or_replayed_packets_are_dropped_and_counted()
    {
        byte[] key = Key(1);
        var c = new TestCluster(3);
        for (int i = 0; i < 3; i++) c[i].SetGroupKey(TestCluster.GroupName, key);
        var captured = new List<Envelope>();
        c.DropWhere(e => { if (e.Kind == PacketKind.Bundle && e.To == c.Id(2).Endpoint) captured.Add(e); return false; });
        c.FormGroup(3);
        c.Send(0, "one");
        c.RunUntil(() => c.Delivered(2).Count == 1);
        Assert.NotEmpty(captured);

        // A replay of a captured (authentic) packet.
        Envelope replay = captured[^1];
        c.Inject(2, replay.From, replay.Bytes);
        Assert.Equal(1, c[2].Counters.DroppedReplayed);
        // A forged packet in the clear, naming member 0, with the next sequence number.
        int view = c.CurrentView(2)!.Id;
        c.Inject(2, c.Id(0).Endpoint, DataPacket(c.Id(0), view, 2, "forged"));
        // A forged packet sealed with another key.
        var forger = new PacketSealer(c.Id(0), 0, null);
        forger.SetGroupKey(G, Key(9));
        c.Inject(2, c.Id(0).Endpoint, forger.Seal(DataPacket(c.Id(0), view, 2, "forged"), new Outbox()).ToArray());
        Assert.Equal(2, c[2].Counters.DroppedUnauthenticated);
        c.Send(0, "two");
        c.RunUntil(() => c.Delivered(2).Count == 2);
        Assert.Equal(["0:1:one", "0:2:two"], c.Delivered(2));
        // Member 0 proved the key long ago: forgeries that name it never get it suspected.
        c.RunFor(200_000);
        Assert.Equal(3, c.CurrentView(0)!.Members.Length);
    }

    [Fact]
    public void The_group_moves_to_a_new_key_at_the_view_change_after_every_member_holds_it_and_the_old_key_retires_at_the_next()
    {
        byte[] oldKey = Key(1), newKey = Key(2);
        var c = new TestCluster(4);
        for (int i = 0; i < 3; i++) c[i].SetGroupKey(TestCluster.GroupName, oldKey);
        c.FormGroup(3);
        int before = c.CurrentView(0)!.Id;
        c.Send(1, "old");
        c.RunUntil(() => c.Delivered(2).Count == 1);

        // Two of three hold the new key: nothing moves.
        c[0].StageGroupKey(TestCluster.GroupName, newKey, c.Now);
        c[1].StageGroupKey(TestCluster.GroupName, newKey, c.Now);
        c.RunFor(200_000);
        Assert.Equal(before, c.CurrentView(0)!.Id);
        Assert.Empty(c.Events[0].OfType<GroupKeyRotated>());
        c.Send(2, "still old");
        c.RunUntil(() => c.Delivered(0).Count == 2);

        // The third: a view change with the same members, and every member moved at its install.
        c[2].StageGroupKey(TestCluster.GroupName, newKey, c.Now);
        c.RunUntil(() => Enumerable.Range(0, 3).All(i => c.Events[i].OfType<GroupKeyRotated>().Any()));
        for (int i = 0; i < 3; i++)
        {
            GroupKeyRotated moved = c.Events[i].OfType<GroupKeyRotated>().Single();
            Assert.Equal(before + 1, moved.ViewId);
            Assert.Equal(PacketSealer.Fingerprint(newKey), moved.Fingerprint);
            Assert.True(c[i].Sealer.UsesGroupKey(G, moved.Fingerprint));
        }
        // Then one more view change, asked by the oldest member, retires the old key everywhere.
        c.RunUntil(() => Enumerable.Range(0, 3).All(i => c.CurrentView(i)!.Id == before + 2 && !c[i].Sealer.IsRetiringGroupKey(G)));
        c.RunFor(500_000);
        Assert.Equal(before + 2, c.CurrentView(0)!.Id); // and no more
        Assert.Equal(3, c.CurrentView(0)!.Members.Length);
        c.Send(0, "new");
        c.RunUntil(() => Enumerable.Range(0, 3).All(i => c.Delivered(i).Count == 3));
        // No packet of the group failed to open around the move.
        Assert.All(Enumerable.Range(0, 3), i => Assert.Equal(0, c[i].Counters.DroppedUnauthenticated));

        // A packet sealed with the old key opens nowhere now.
        var oldSealer = new PacketSealer(c.Id(0), 0, null);
        oldSealer.SetGroupKey(G, oldKey);
        long dropped = c[2].Counters.DroppedUnauthenticated;
        c.Inject(2, c.Id(0).Endpoint, oldSealer.Seal(DataPacket(c.Id(0), before + 2, 3, "forged with the old key"), new Outbox()).ToArray());
        Assert.Equal(dropped + 1, c[2].Counters.DroppedUnauthenticated);
        Assert.Equal(3, c.Delivered(2).Count);

        // A joiner comes with the key the group uses.
        c[3].SetGroupKey(TestCluster.GroupName, newKey);
        c.Join(3);
        c.RunUntil(() => c.CurrentView(3)?.Members.Length == 4);
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public void A_process_with_another_key_or_none_is_refused_and_the_group_goes_on(bool otherKey)
    {
        byte[] key = Key(1);
        var c = new TestCluster(4);
        for (int i = 0; i < 3; i++) c[i].SetGroupKey(TestCluster.GroupName, key);
        c.FormGroup(3);
        if (otherKey) c[3].SetGroupKey(TestCluster.GroupName, Key(2));
        c.Join(3);
        c.Send(0, "members only");
        // It cannot take part in the group's next flush (its report does not open), so the members
        // have the service expel it: the process is out, after it told its application why.
        c.RunUntil(() => c[3].IsShutDown && c.CurrentView(0)!.Members.Length == 3, limit: 10_000_000);
        GroupKeyRejected rejected = Assert.Single(c.Events[3].OfType<GroupKeyRejected>());
        Assert.Contains("key", rejected.Reason);
        // It never saw the group: no view, no delivery, no state.
        Assert.Empty(c.Events[3].OfType<ViewInstalled>());
        Assert.Empty(c.Events[3].OfType<MessageDelivered>());
        Assert.True(c[0].Counters.DroppedUnauthenticated > 0);
        c.Send(1, "still going");
        c.RunUntil(() => c.Delivered(2).Count == 2);
    }

    [Fact]
    public void With_a_system_key_a_process_without_it_gets_nothing_from_the_service_and_a_forged_view_is_refused()
    {
        byte[] systemKey = Key(5);
        var c = new TestCluster(3, new ProtocolOptions { SystemKey = systemKey });
        c.FormGroup(2);
        // A third process without the system key: its heartbeats and join never open at the service.
        int outsider = c.AddProcess(new ProtocolOptions());
        c.Join(outsider);
        c.RunFor(300_000);
        Assert.Empty(c.Events[outsider].OfType<ViewInstalled>());
        Assert.True(c.Oracle.Counters.DroppedUnauthenticated > 0);
        // A forged InstallView in the clear, naming the service as its sender, is refused unread.
        GroupView current = c.CurrentView(0)!;
        byte[] forged = new PacketWriter().Begin(new PacketHeader(PacketKind.InstallView, c.Oracle.Self, G, current.Id + 1, 0))
            .Node(c.Id(0)).Nodes([c.Id(0)]).Nodes([]).Nodes([c.Id(1)]).Finish();
        long before = c[0].Counters.DroppedUnauthenticated;
        c.Inject(0, c.Oracle.Self.Endpoint, forged);
        Assert.Equal(before + 1, c[0].Counters.DroppedUnauthenticated);
        Assert.Equal(current.Id, c.CurrentView(0)!.Id);
        c.Send(0, "fine");
        c.RunUntil(() => c.Delivered(1).Count == 1);
    }

    [Fact]
    public void The_mutation_AcceptUnauthenticated_lets_a_forged_message_through()
    {
        byte[] key = Key(1);
        var c = new TestCluster(2, new ProtocolOptions { Mutations = ProtocolMutations.AcceptUnauthenticated });
        for (int i = 0; i < 2; i++) c[i].SetGroupKey(TestCluster.GroupName, key);
        c.FormGroup(2);
        c.Inject(1, c.Id(0).Endpoint, DataPacket(c.Id(0), c.CurrentView(1)!.Id, 1, "forged"));
        c.RunFor(10_000);
        Assert.Contains("0:1:forged", c.Delivered(1));
    }

    private static void FixChecksum(byte[] packet)
    {
        BinaryPrimitives.WriteUInt32LittleEndian(packet.AsSpan(PacketHeader.ChecksumOffset), 0);
        BinaryPrimitives.WriteUInt32LittleEndian(packet.AsSpan(PacketHeader.ChecksumOffset), Crc32C.Compute(packet));
    }
}
