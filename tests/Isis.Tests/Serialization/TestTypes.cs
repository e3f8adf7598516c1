namespace Isis.Tests.Serialization;

public enum Color { Red, Green, Blue }

public enum Tiny : byte { Zero = 0, Max = 255 }

public enum Signed : sbyte { Low = -128, High = 127 }

public enum Huge : ulong { Big = ulong.MaxValue - 1 }

[Flags]
public enum Perms { None = 0, Read = 1, Write = 2, Exec = 4 }

public sealed record Order(string Item, int Count, List<string> Tags, decimal Price);

public record struct Point(int X, int Y);

public sealed record Animal(string Name);

/// <summary>Throws if anyone ever creates it: proves hostile payloads cannot instantiate types.</summary>
public sealed class Tripwire
{
    public Tripwire() => throw new InvalidOperationException("Tripwire was instantiated");

    public int Value { get; set; }
}

/// <summary>Annotated: travels by its contract (an array of the keyed members).</summary>
[MessagePack.MessagePackObject]
public sealed record Quote([property: MessagePack.Key(0)] string Symbol, [property: MessagePack.Key(1)] decimal Price);

/// <summary>A class with settable members and a parameterless constructor, including a DateTime that must keep its kind.</summary>
public sealed class Stamp
{
    public DateTime At { get; set; }

    public Guid Id { get; set; }

    public string? Note { get; set; }
}

/// <summary>Can be made into a cycle.</summary>
public sealed class Link
{
    public string? Name { get; set; }

    public Link? Next { get; set; }
}

/// <summary>No public members and no usable constructor: MessagePack cannot serialize it.</summary>
public sealed class Opaque
{
    private readonly int _secret;

    public Opaque(int secret) => _secret = secret;

    public override string ToString() => _secret.ToString(System.Globalization.CultureInfo.InvariantCulture);
}

/// <summary>A member of type object: MessagePack reads it as primitives, maps and arrays only.</summary>
public sealed class Envelope
{
    public object? Body { get; set; }
}

/// <summary>Arbitrarily deep nesting, to reach the library's depth limit for untrusted data.</summary>
public sealed class Nest
{
    public Nest? Inner { get; set; }
}
