using System.Text.RegularExpressions;
using Xunit.Abstractions;

namespace Isis.Tests.Api;

/// <summary>
/// Every public member should have a test that fails if it breaks. This check reads the libraries'
/// public API files (src/*/PublicAPI.*.txt), looks for each member in the tests' sources, prints the
/// members no test names, and fails when that list differs from <c>untested-public-api.txt</c>
/// beside this file: a new member without a test makes it grow, and a test for a listed member
/// must take it off (the list only shrinks).
/// </summary>
/// <remarks>
/// A grep, not a compiler: a member counts as named when its name appears where a use would put it
/// (<c>.Name</c>, <c>Name =</c> in an initializer, <c>Type.Name</c> for enum values, the type's
/// name for its constructors, <c>+=</c>/<c>-=</c> on the list for a handler list's operators).
/// Overloads share one entry. What records generate (equality, ToString, Deconstruct) is left out.
/// </remarks>
public sealed partial class PublicApiCoverageTests(ITestOutputHelper output)
{
    private static readonly string[] Libraries = ["src/Isis", "src/Isis.Collections", "src/Isis.Hosting", "src/Isis.Perpetual", "src/Isis.Simulation"];

    private static readonly HashSet<string> Generated = new(StringComparer.Ordinal)
    {
        "Equals", "GetHashCode", "ToString", "Deconstruct", "<Clone>$", "EqualityContract", "PrintMembers", "operator ==", "operator !=",
        "Invoke", "BeginInvoke", "EndInvoke", // a delegate's: it is called as a method
    };

    // Operators are used as compound assignments on the property that holds the list.
    private static readonly Dictionary<string, Regex> OperatorUses = new(StringComparer.Ordinal)
    {
        ["HandlerList.operator +"] = new(@"Handlers\[[^\]]*\]\s*\+=", RegexOptions.Compiled),
        ["HandlerList.operator -"] = new(@"Handlers\[[^\]]*\]\s*-=", RegexOptions.Compiled),
        ["ViewHandlerList.operator +"] = new(@"ViewHandlers\s*\+=", RegexOptions.Compiled),
        ["ViewHandlerList.operator -"] = new(@"ViewHandlers\s*-=", RegexOptions.Compiled),
    };

    [Fact]
    public void The_list_of_public_members_no_test_names_does_not_grow()
    {
        string baselinePath = Path.Combine(RepoPaths.Root, "tests/Isis.Tests/Api/untested-public-api.txt");
        string tests = TestSources();
        List<Member> members = PublicMembers();
        // A type counts as tested when its name appears or a test names one of its members.
        var named = members.Where(m => Named(m, tests)).ToList();
        var typesUsed = named.Select(m => m.Type).ToHashSet(StringComparer.Ordinal);
        List<string> untested = members.Where(m => !named.Contains(m) && !(m.Kind == MemberKind.Type && typesUsed.Contains(m.Type)))
            .Select(m => m.Key).Distinct().Order(StringComparer.Ordinal).ToList();
        output.WriteLine($"{untested.Count} public members no test names:");
        foreach (string m in untested) output.WriteLine("  " + m);

        var baseline = File.ReadAllLines(baselinePath).Where(l => l.Length > 0 && !l.StartsWith('#')).ToHashSet(StringComparer.Ordinal);
        string[] grew = untested.Where(m => !baseline.Contains(m)).ToArray();
        string[] tested = baseline.Where(m => !untested.Contains(m)).Order(StringComparer.Ordinal).ToArray();
        Assert.True(grew.Length == 0, $"public members without a test: {string.Join(", ", grew)}. Write a test that calls each (or, for a reason said in the commit, list it in {baselinePath}).");
        Assert.True(tested.Length == 0, $"these members have tests now: take them off {baselinePath}: {string.Join(", ", tested)}");
    }

    [Fact]
    public void The_check_finds_a_member_no_test_names_and_one_a_test_calls()
    {
        string tests = "group.Flush(2); var s = new Widget(1); x.Handlers[3] -= h; Color.Red; o.Depth = 4;";
        Assert.True(Named(new Member("Isis.Group", "Flush", MemberKind.Method), tests));
        Assert.False(Named(new Member("Isis.Group", "FlushAsync", MemberKind.Method), tests));
        Assert.True(Named(new Member("Isis.Widget", "Widget", MemberKind.Constructor), tests));
        Assert.True(Named(new Member("Isis.HandlerList", "operator -", MemberKind.Operator), tests));
        Assert.False(Named(new Member("Isis.HandlerList", "operator +", MemberKind.Operator), tests));
        Assert.True(Named(new Member("Isis.Color", "Red", MemberKind.EnumValue), tests));
        Assert.False(Named(new Member("Isis.Color", "Blue", MemberKind.EnumValue), tests));
        Assert.True(Named(new Member("Isis.Options", "Depth", MemberKind.Property), tests));
        Assert.Contains(PublicMembers(), m => m.Key == "Isis.Group.OrderedSendAsync");
        Assert.DoesNotContain(PublicMembers(), m => m.Name == "GetHashCode" || m.Name.Contains('$'));
        Assert.Contains(PublicMembers(), m => m.Key == "Isis.Group.TerminateAsync" && m.Kind == MemberKind.Method); // a default value is no enum value
    }

    private enum MemberKind { Type, Constructor, Method, Property, EnumValue, Operator }

    private sealed record Member(string Type, string Name, MemberKind Kind)
    {
        public string Key => Kind == MemberKind.Type ? Type : $"{Type}.{Name}";

        public string SimpleType => Type[(Type.LastIndexOf('.') + 1)..];
    }

    private static bool Named(Member m, string tests) => m.Kind switch
    {
        MemberKind.Type or MemberKind.Constructor => Regex.IsMatch(tests, $@"\b{Regex.Escape(m.SimpleType)}\b"),
        MemberKind.EnumValue => Regex.IsMatch(tests, $@"\b{Regex.Escape(m.SimpleType)}\.{Regex.Escape(m.Name)}\b"),
        MemberKind.Operator => OperatorUses.TryGetValue($"{m.SimpleType}.{m.Name}", out Regex? use) && use.IsMatch(tests),
        _ => Regex.IsMatch(tests, $@"(\.{Regex.Escape(m.Name)}\b)|(\b{Regex.Escape(m.Name)}\s*=[^=])"),
    };

    private static string TestSources()
    {
        var text = new System.Text.StringBuilder();
        foreach (string file in Directory.EnumerateFiles(Path.Combine(RepoPaths.Root, "tests"), "*.cs", SearchOption.AllDirectories))
        {
            string relative = Path.GetRelativePath(RepoPaths.Root, file).Replace('\\', '/');
            if (relative.Contains("/bin/", StringComparison.Ordinal) || relative.Contains("/obj/", StringComparison.Ordinal)) continue;
            if (relative.EndsWith("/PublicApiCoverageTests.cs", StringComparison.Ordinal)) continue; // its own examples name no real use
            text.AppendLine(File.ReadAllText(file));
        }
        return text.ToString();
    }

    /// <summary>The members the public API files declare (generated record members left out), with the type each belongs to.</summary>
    private static List<Member> PublicMembers()
    {
        var lines = new List<string>();
        foreach (string library in Libraries)
        {
            foreach (string file in new[] { "PublicAPI.Shipped.txt", "PublicAPI.Unshipped.txt" })
            {
                lines.AddRange(File.ReadAllLines(Path.Combine(RepoPaths.Root, library, file)).Where(l => l.Length > 0 && !l.StartsWith('#')));
            }
        }
        // A declaration without " -> " is a type.
        var types = lines.Where(l => !l.Contains(" -> ", StringComparison.Ordinal)).Select(StripGenerics).ToHashSet(StringComparer.Ordinal);
        var members = types.Select(t => new Member(t, "", MemberKind.Type)).ToList();
        foreach (string line in lines.Where(l => l.Contains(" -> ", StringComparison.Ordinal) && !l.Contains("<Clone>$", StringComparison.Ordinal)))
        {
            string declaration = ModifierPrefix().Replace(line, "");
            bool isConst = line.StartsWith("const ", StringComparison.Ordinal);
            string head = declaration[..declaration.IndexOf(" -> ", StringComparison.Ordinal)];
            int paren = head.IndexOf('(', StringComparison.Ordinal);
            int equals = head.IndexOf(" = ", StringComparison.Ordinal);
            if (paren >= 0 && equals > paren) equals = -1; // a parameter's default value, not an enum value or a constant
            bool isValue = equals >= 0 && !isConst; // an enum value: "T.Name = 0"
            if (equals >= 0) head = head[..equals];
            string path = StripGenerics(paren >= 0 ? head[..paren] : head);
            int op = path.IndexOf(".operator ", StringComparison.Ordinal);
            string type, name;
            if (op >= 0)
            {
                (type, name) = (path[..op], path[(op + 1)..]);
            }
            else
            {
                foreach (string accessor in new[] { ".get", ".set", ".init", ".add", ".remove" })
                {
                    if (path.EndsWith(accessor, StringComparison.Ordinal)) path = path[..^accessor.Length];
                }
                if (path.EndsWith(".this[int", StringComparison.Ordinal) || path.Contains(".this[", StringComparison.Ordinal)) path = path[..path.IndexOf(".this[", StringComparison.Ordinal)] + ".this[]";
                int dot = path.LastIndexOf('.');
                (type, name) = (path[..dot], path[(dot + 1)..]);
            }
            if (Generated.Contains(name) || !types.Contains(type)) continue;
            string simpleType = type[(type.LastIndexOf('.') + 1)..];
            MemberKind kind = op >= 0 ? MemberKind.Operator
                : isValue ? MemberKind.EnumValue
                : name == simpleType ? MemberKind.Constructor
                : paren >= 0 ? MemberKind.Method
                : MemberKind.Property;
            if (name == "this[]") continue; // an indexer is used as list[i]: its type's name stands for it
            members.Add(new Member(type, name, kind));
        }
        return members;
    }

    private static string StripGenerics(string s)
    {
        for (string before = ""; before != s;) (before, s) = (s, GenericArguments().Replace(s, ""));
        return s;
    }

    [GeneratedRegex(@"^((static|override|~override|virtual|abstract|const|readonly|sealed|new)\s+)+")]
    private static partial Regex ModifierPrefix();

    [GeneratedRegex(@"<[^<>]*>")]
    private static partial Regex GenericArguments();
}
