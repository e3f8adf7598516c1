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
