using Isis.Core.Identity;
using Isis.Simulation.Checking;
using static Isis.Simulation.Tests.Checking.HistoryBuilder;

namespace Isis.Simulation.Tests.Checking;

public sealed class HistoryJsonLinesTests
{
    private static History EveryKind()
    {
        NodeId p = N(1), q = new(EndpointCodec.FromIPv4(0x0A000001, 7000), 2), big = new(ulong.MaxValue, uint.MaxValue);
        var h = new History();
        var m = new MessageId(p, G, 3, 1);
        h.RecordJoinRequested(1, q, G);
        h.RecordViewInstall(2, p, G, 3, [p, q, big]);
        h.RecordSend(3, m, ulong.MaxValue);
        h.RecordDeliver(4, p, 3, m, ulong.MaxValue);
        h.RecordDeliver(5, q, 4, m, 0);                                  // odd but representable
        h.Add(new HistoryEvent(6, q, HistoryEventKind.Deliver)          // message group differs from g
        {
            Group = G, ViewId = 3, Message = m with { Group = new GroupId(7) }, PayloadHash = 9,
        });
        h.RecordExpel(7, big);
        h.RecordCrash(8, big);
        h.RecordLeaveCompleted(9, q, G);
        h.RecordHeal(10);
        h.RecordEnd(long.MaxValue);
        return h;
    }

    private static string Write(History h)
    {
        var w = new StringWriter();
        h.WriteJsonLines(w);
        return w.ToString();
    }

    [Fact]
    public void Every_kind_of_event_round_trips_through_json_lines()
    {
        History original = EveryKind();
        string text = Write(original);
        History back = History.ReadJsonLines(new StringReader(text));

        Assert.Equal(original.Events, back.Events);
        Assert.Equal(text, Write(back));
        Assert.Equal(original.Count, text.Split('\n', StringSplitOptions.RemoveEmptyEntries).Length);
    }

    [Fact]
    public void A_checked_history_round_trips_to_the_same_verdict()
    {
        var b = new HistoryBuilder().InstallAll(1, N(1), N(2));
        b.Send(N(1));
        b.InstallAll(2, N(1), N(2)).End();        // N(2) missed the message: a VirtualSynchrony violation
        History back = History.ReadJsonLines(new StringReader(Write(b.History)));
        Assert.Equal(b.Check().ToString(), HistoryChecker.Check(back).ToString());
    }

    [Fact]
    public void Lines_are_compact_and_human_readable()
    {
        var h = new History();
        var m = new MessageId(N(3), new GroupId(0xab), 2, 5);
        h.RecordDeliver(1500, N(1), 2, m, 0xff);
        h.RecordViewInstall(1600, N(1), new GroupId(0xab), 3, [N(1), N(3)]);
        h.RecordHeal(1700);
        Assert.Equal(
            """
            {"t":1500,"p":"s1#1","k":"Deliver","g":"00000000000000ab","v":2,"ms":"s3#1","mv":2,"mq":5,"h":"00000000000000ff"}
            {"t":1600,"p":"s1#1","k":"ViewInstall","g":"00000000000000ab","v":3,"mb":["s1#1","s3#1"]}
            {"t":1700,"k":"Heal"}

            """.ReplaceLineEndings("\n"),
            Write(h));
    }

    [Fact]
    public void Blank_lines_and_unknown_fields_are_tolerated()
    {
        History h = History.ReadJsonLines(new StringReader(
            "\n{\"t\":5,\"p\":\"10.0.0.1:7000#2\",\"k\":\"Crash\",\"future\":{\"x\":[1,2]}}\n\n{\"t\":6,\"k\":\"End\"}\n"));
        Assert.Equal(2, h.Count);
        Assert.Equal(new NodeId(EndpointCodec.FromIPv4(0x0A000001, 7000), 2), h[0].Process);
        Assert.Equal(HistoryEventKind.End, h[1].Kind);
    }

    [Theory]
    [InlineData("{\"t\":1,\"k\":\"End\"", "malformed JSON")]
    [InlineData("[1,2]", "expected a JSON object")]
    [InlineData("{\"k\":\"End\"}", "missing field 't'")]
    [InlineData("{\"t\":1}", "missing field 'k'")]
    [InlineData("{\"t\":1,\"k\":\"Explode\"}", "unknown kind 'Explode'")]
    [InlineData("{\"t\":1,\"k\":\"7\"}", "unknown kind '7'")]
    [InlineData("{\"t\":1,\"k\":\"Send, Deliver\"}", "unknown kind 'Send, Deliver'")]
    [InlineData("{\"t\":1,\"k\":\"end\"}", "unknown kind 'end'")]
    [InlineData("{\"t\":\"soon\",\"k\":\"End\"}", "field 't'")]
    [InlineData("{\"t\":1.5,\"k\":\"End\"}", "field 't'")]
    [InlineData("{\"t\":1,\"p\":\"s1\",\"k\":\"Crash\"}", "field 'p': 's1'")]
    [InlineData("{\"t\":1,\"p\":\"1.2.3:80#1\",\"k\":\"Crash\"}", "field 'p'")]
    [InlineData("{\"t\":1,\"k\":\"Send\",\"g\":\"xyz\"}", "field 'g'")]
    [InlineData("{\"t\":1,\"k\":\"ViewInstall\",\"mb\":\"s1#1\"}", "field 'mb'")]
    [InlineData("{\"t\":1,\"k\":\"End\"} {}", "malformed JSON")]
    public void A_malformed_line_is_reported_with_its_line_number_and_reason(string badLine, string reason)
    {
        string text = "{\"t\":0,\"k\":\"Heal\"}\n\n" + badLine + "\n{\"t\":9,\"k\":\"End\"}\n";
        HistoryFormatException ex = Assert.Throws<HistoryFormatException>(() => History.ReadJsonLines(new StringReader(text)));
        Assert.Equal(3, ex.LineNumber);
        Assert.StartsWith("history line 3: ", ex.Message, StringComparison.Ordinal);
        Assert.Contains(reason, ex.Message, StringComparison.Ordinal);
    }
}
