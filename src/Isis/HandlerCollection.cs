using Isis.Dispatch;

namespace Isis;

/// <summary>
/// A group's message handlers by request code: <c>g.Handlers[UPDATE] += (Action&lt;string, int&gt;)((item, n) => ...)</c>.
/// Any delegate type and arity works; several handlers may share a code and are picked by the
/// types of the arguments a message carries.
/// </summary>
public sealed class HandlerCollection
{
    internal HandlerCollection() => Table = new HandlerTable();

    internal HandlerTable Table { get; }

    /// <summary>The handlers of one request code.</summary>
    /// <param name="opcode">The request code (any int the application chooses).</param>
    public HandlerList this[int opcode]
    {
        get => new(Table, opcode);
        set
        {
            // "+=" reads the list, adds through the operator, and assigns it back: nothing more to do,
            // unless someone assigns the list of another code.
            ArgumentNullException.ThrowIfNull(value);
            if (value.Opcode != opcode || !ReferenceEquals(value.Table, Table))
            {
                throw new InvalidOperationException(
                    $"Handlers[{opcode}] can only be extended with += or reduced with -=; register the delegate with g.Handlers[{opcode}] += handler.");
            }
        }
    }
}

/// <summary>The handlers registered for one request code; use <c>+=</c> and <c>-=</c>.</summary>
public sealed class HandlerList
{
    internal HandlerList(HandlerTable table, int opcode)
    {
        Table = table;
        Opcode = opcode;
    }

    internal HandlerTable Table { get; }

    internal int Opcode { get; }

    /// <summary>How many handlers are registered for this code.</summary>
    public int Count => Table.Count(Opcode);

    /// <summary>Registers a handler: any delegate type, any number of parameters.</summary>
    /// <exception cref="ArgumentException">The delegate has parameters that messages can never carry (ref, out, pointers, open generics).</exception>
    public static HandlerList operator +(HandlerList list, Delegate handler)
    {
        ArgumentNullException.ThrowIfNull(list);
        list.Table.Register(list.Opcode, handler);
        return list;
    }

    /// <summary>Removes a handler registered earlier.</summary>
    public static HandlerList operator -(HandlerList list, Delegate handler)
    {
        ArgumentNullException.ThrowIfNull(list);
        list.Table.Unregister(list.Opcode, handler);
        return list;
    }
}
