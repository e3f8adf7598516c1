namespace Isis;

/// <summary>Called on the group's delivery thread each time a view is installed, in order with deliveries.</summary>
/// <param name="view">The newly installed view.</param>
public delegate void ViewHandler(View view);

/// <summary>
/// The view handlers of a group: <c>g.ViewHandlers += (ViewHandler)(v => ...)</c>.
/// </summary>
public sealed class ViewHandlerList
{
    private ViewHandler[] _handlers = [];

    internal ViewHandlerList()
    {
    }

    internal ViewHandler[] Snapshot => Volatile.Read(ref _handlers);

    /// <summary>Adds a view handler.</summary>
    public static ViewHandlerList operator +(ViewHandlerList list, ViewHandler handler)
    {
        ArgumentNullException.ThrowIfNull(list);
        ArgumentNullException.ThrowIfNull(handler);
        lock (list)
        {
            list._handlers = [.. list._handlers, handler];
        }
        return list;
    }

    /// <summary>Removes a view handler.</summary>
    public static ViewHandlerList operator -(ViewHandlerList list, ViewHandler handler)
    {
        ArgumentNullException.ThrowIfNull(list);
        lock (list)
        {
            list._handlers = list._handlers.Where(h => h != handler).ToArray();
        }
        return list;
    }
}
