using Isis.Core.Groups;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Isis.Core.Identity;

namespace Isis.Simulation;

/// <summary>The JSON-lines encoding of one <see cref="HistoryEvent"/> (see <see cref="History.WriteJsonLines"/>).</summary>
internal static class HistoryJson
{
    // 64-bit ids and hashes travel as strings: JSON readers in other languages round numbers above 2^53.

    public static void Write(Utf8JsonWriter json, HistoryEvent e)
    {
        json.WriteStartObject();
        json.WriteNumber("t"u8, e.Time);
        if (!e.Process.IsNone) json.WriteString("p"u8, FormatNode(e.Process));
        json.WriteString("k"u8, KindName(e.Kind));
        if (e.Group != default) json.WriteString("g"u8, FormatHex(e.Group.Value));
        if (e.ViewId != 0 || UsesView(e.Kind)) json.WriteNumber("v"u8, e.ViewId);
        if (e.Message != default)
        {
            json.WriteString("ms"u8, FormatNode(e.Message.Sender));
            if (e.Message.Group != e.Group) json.WriteString("mg"u8, FormatHex(e.Message.Group.Value));
            json.WriteNumber("mv"u8, e.Message.ViewId);
            json.WriteNumber("mq"u8, e.Message.Seq);
        }
        if (e.PayloadHash != 0 || UsesMessage(e.Kind)) json.WriteString("h"u8, FormatHex(e.PayloadHash));
        if (e.Primitive != MessageKind.Send) json.WriteNumber("pr"u8, (int)e.Primitive);
        if (e.Phi != 0) json.WriteNumber("phi"u8, e.Phi);
        if (e.AtViewEnd) json.WriteBoolean("ve"u8, true);
        if (e.IsQuery) json.WriteBoolean("qy"u8, true);
        if (e.LogIndex != 0) json.WriteNumber("ix"u8, e.LogIndex);
        if (e.Members is not null)
        {
            json.WriteStartArray("mb"u8);
            foreach (NodeId m in e.Members) json.WriteStringValue(FormatNode(m));
            json.WriteEndArray();
        }
        if (e.Voters is not null)
        {
            json.WriteStartArray("vt"u8);
            foreach (NodeId m in e.Voters) json.WriteStringValue(FormatNode(m));
            json.WriteEndArray();
        }
        if (e.ConfigurationIndex != 0) json.WriteNumber("ci"u8, e.ConfigurationIndex);
        if (e.Description is not null) json.WriteString("ds"u8, e.Description);
        json.WriteEndObject();
    }

    public static HistoryEvent Read(ReadOnlySpan<byte> line)
    {
        var r = new Utf8JsonReader(line, new JsonReaderOptions { CommentHandling = JsonCommentHandling.Disallow });
        if (!r.Read() || r.TokenType != JsonTokenType.StartObject) throw new FormatException("expected a JSON object");

        long? time = null;
        HistoryEventKind? kind = null;
        NodeId process = NodeId.None;
        GroupId group = default;
        GroupId? messageGroup = null;
        int viewId = 0;
        NodeId msgSender = NodeId.None;
        int msgView = 0;
        long msgSeq = 0;
        bool hasMessage = false;
        ulong hash = 0;
        var primitive = MessageKind.Send;
        int phi = 0;
        bool atViewEnd = false;
        bool query = false;
        long logIndex = 0;
        NodeId[]? members = null;
        NodeId[]? voters = null;
        long configurationIndex = 0;
        string? description = null;

        while (true)
        {
            if (!r.Read()) throw new FormatException("unterminated object");
            if (r.TokenType == JsonTokenType.EndObject) break;
            string field = r.GetString()!;
            r.Read();
            switch (field)
            {
                case "t": time = Int64(ref r, field); break;
                case "p": process = ParseNode(Text(ref r, field), field); break;
                case "k": kind = ParseKind(Text(ref r, field)); break;
                case "g": group = new GroupId(ParseHex(Text(ref r, field), field)); break;
                case "v": viewId = Int32(ref r, field); break;
                case "ms": msgSender = ParseNode(Text(ref r, field), field); hasMessage = true; break;
                case "mg": messageGroup = new GroupId(ParseHex(Text(ref r, field), field)); hasMessage = true; break;
                case "mv": msgView = Int32(ref r, field); hasMessage = true; break;
                case "mq": msgSeq = Int64(ref r, field); hasMessage = true; break;
                case "h": hash = ParseHex(Text(ref r, field), field); break;
                case "mb": members = ReadMembers(ref r, field); break;
                case "vt": voters = ReadMembers(ref r, field); break;
                case "ci": configurationIndex = Int64(ref r, field); break;
                case "pr": primitive = (MessageKind)Int32(ref r, field); break;
                case "phi": phi = Int32(ref r, field); break;
                case "ve": atViewEnd = r.TokenType == JsonTokenType.True; break;
                case "qy": query = r.TokenType == JsonTokenType.True; break;
                case "ix": logIndex = Int64(ref r, field); break;
                case "ds": description = Text(ref r, field); break;
                default: r.Skip(); break; // forward compatibility: newer writers may add fields
            }
        }
        if (r.Read()) throw new FormatException("unexpected content after the object");
        if (time is null) throw new FormatException("missing field 't'");
        if (kind is null) throw new FormatException("missing field 'k'");

        return new HistoryEvent(time.Value, process, kind.Value)
        {
            Group = group,
            ViewId = viewId,
            Message = hasMessage ? new MessageId(msgSender, messageGroup ?? group, msgView, msgSeq) : default,
            PayloadHash = hash,
            Primitive = primitive,
            Phi = phi,
            AtViewEnd = atViewEnd,
            IsQuery = query,
            LogIndex = logIndex,
            Members = members,
            Voters = voters,
            ConfigurationIndex = configurationIndex,
            Description = description,
        };
    }

    private static NodeId[] ReadMembers(ref Utf8JsonReader r, string field)
    {
        if (r.TokenType != JsonTokenType.StartArray) throw new FormatException($"field '{field}': expected an array");
        var list = new List<NodeId>();
        while (r.Read() && r.TokenType != JsonTokenType.EndArray)
        {
            list.Add(ParseNode(Text(ref r, field), field));
        }
        return [.. list];
    }

    private static long Int64(ref Utf8JsonReader r, string field)
    {
        if (r.TokenType == JsonTokenType.Number && r.TryGetInt64(out long v)) return v;
        throw BadNumber(ref r, field, "64-bit integer");
    }

    private static int Int32(ref Utf8JsonReader r, string field)
    {
        if (r.TokenType == JsonTokenType.Number && r.TryGetInt32(out int v)) return v;
        throw BadNumber(ref r, field, "32-bit integer");
    }

    private static FormatException BadNumber(ref Utf8JsonReader r, string field, string what) =>
        new($"field '{field}': expected a {what}, got {r.TokenType} {Encoding.UTF8.GetString(r.ValueSpan)}");

    private static string Text(ref Utf8JsonReader r, string field)
    {
        if (r.TokenType != JsonTokenType.String) throw new FormatException($"field '{field}': expected a string");
        return r.GetString()!;
    }

    private static bool UsesView(HistoryEventKind k) =>
        k is HistoryEventKind.Send or HistoryEventKind.Deliver or HistoryEventKind.ViewInstall;

    private static bool UsesMessage(HistoryEventKind k) => k is HistoryEventKind.Send or HistoryEventKind.Deliver or HistoryEventKind.Replay or HistoryEventKind.Restore;

    private static readonly string[] KindNames = Enum.GetNames<HistoryEventKind>();

    private static string KindName(HistoryEventKind k) =>
        (uint)k < (uint)KindNames.Length ? KindNames[(int)k] : ((int)k).ToString(CultureInfo.InvariantCulture);

    private static HistoryEventKind ParseKind(string s)
    {
        // Exact names only: Enum.TryParse would also take "1" or "Send, Deliver".
        int i = Array.IndexOf(KindNames, s);
        return i >= 0 ? Enum.GetValues<HistoryEventKind>()[i] : throw new FormatException($"field 'k': unknown kind '{s}'");
    }

    private static string FormatHex(ulong v) => v.ToString("x16", CultureInfo.InvariantCulture);

    private static ulong ParseHex(string s, string field) =>
        s.Length is > 0 and <= 16 && ulong.TryParse(s, NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out ulong v)
            ? v
            : throw new FormatException($"field '{field}': '{s}' is not a 64-bit hex number");

    /// <summary>
    /// "s3#1" for simulator endpoints, "10.0.0.1:7000#2" for IPv4 ones (NodeId.ToString), and a plain
    /// decimal endpoint when the value does not fit those (so every NodeId round-trips).
    /// </summary>
    internal static string FormatNode(NodeId n) =>
        n.Endpoint < (1UL << 48)
            ? n.ToString()
            : string.Create(CultureInfo.InvariantCulture, $"{n.Endpoint}#{n.Incarnation}");

    internal static NodeId ParseNode(string s, string field)
    {
        int hash = s.LastIndexOf('#');
        if (hash <= 0 || !uint.TryParse(s.AsSpan(hash + 1), NumberStyles.None, CultureInfo.InvariantCulture, out uint inc))
        {
            throw new FormatException($"field '{field}': '{s}' is not a process id like 's3#1' or '10.0.0.1:7000#2'");
        }
        ReadOnlySpan<char> ep = s.AsSpan(0, hash);
        ulong endpoint;
        if (ep[0] == 's' && ulong.TryParse(ep[1..], NumberStyles.None, CultureInfo.InvariantCulture, out endpoint))
        {
            return new NodeId(endpoint, inc);
        }
        if (ulong.TryParse(ep, NumberStyles.None, CultureInfo.InvariantCulture, out endpoint))
        {
            return new NodeId(endpoint, inc);
        }
        int colon = ep.LastIndexOf(':');
        if (colon > 0
            && ushort.TryParse(ep[(colon + 1)..], NumberStyles.None, CultureInfo.InvariantCulture, out ushort port)
            && TryParseIPv4(ep[..colon], out uint ip))
        {
            return new NodeId(EndpointCodec.FromIPv4(ip, port), inc);
        }
        throw new FormatException($"field '{field}': '{s}' is not a process id like 's3#1' or '10.0.0.1:7000#2'");
    }

    private static bool TryParseIPv4(ReadOnlySpan<char> s, out uint ip)
    {
        ip = 0;
        int parts = 0;
        foreach (Range part in s.Split('.'))
        {
            if (++parts > 4 || !byte.TryParse(s[part], NumberStyles.None, CultureInfo.InvariantCulture, out byte b)) return false;
            ip = (ip << 8) | b;
        }
        return parts == 4;
    }
}
