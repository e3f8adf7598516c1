using System.Net.Sockets;
using Isis.Core.Identity;
using Isis.Transport;

namespace Isis.Runtime;

/// <summary>
/// Which IP multicast address each of this process's groups receives on, kept in step with the
/// views the core installs: the transport joins a view's address when the view is installed and
/// leaves the previous one (joins nest, so groups sharing an address share the membership). The
/// driving thread only.
/// </summary>
internal sealed class MulticastMemberships(IPacketTransport transport, Action<string> reportProblem)
{
    private readonly Dictionary<GroupId, ulong> _joined = [];

    /// <summary>The group installed a view whose data goes to <paramref name="address"/> (0: unicast).</summary>
    public void OnView(GroupId group, ulong address)
    {
        _joined.TryGetValue(group, out ulong current);
        if (current == address) return;
        if (current != 0) Leave(group, current);
        if (address == 0) return;
        if (!transport.SupportsMulticast)
        {
            // The service allocates addresses only when configured for multicast, which the options
            // allow only over UDP with a multicast port: this is a process configured unlike the rest.
            reportProblem($"group {group}: the membership service gave it the multicast address {EndpointCodec.Format(address)}, but this process has no multicast " +
                          "(IsisOptions.Multicast must be the same at every process); its members' multicasts reach it only through repairs");
            return;
        }
        try
        {
            transport.JoinMulticast(address);
            _joined[group] = address;
        }
        catch (SocketException e)
        {
            reportProblem($"group {group}: joining the multicast address {EndpointCodec.Format(address)} failed ({e.SocketErrorCode}: {e.Message}); " +
                          "its members' multicasts reach this process only through repairs. Check the interface (IsisOptions.Multicast.Interface) and the host's multicast limits");
        }
    }

    /// <summary>The group is left: stop receiving on its address.</summary>
    public void OnLeft(GroupId group)
    {
        if (_joined.TryGetValue(group, out ulong current)) Leave(group, current);
    }

    private void Leave(GroupId group, ulong address)
    {
        _joined.Remove(group);
        try
        {
            transport.LeaveMulticast(address);
        }
        catch (SocketException)
        {
            // The socket is closing or the membership is gone already: nothing more arrives either way.
        }
    }
}
