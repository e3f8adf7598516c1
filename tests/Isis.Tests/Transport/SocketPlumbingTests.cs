using System.Net;
using System.Net.Sockets;
using Isis.Transport;

namespace Isis.Tests.Transport;

public sealed class SocketPlumbingTests
{
    [Theory]
    // The kind travels as an int because the enum is internal and test methods are public.
    [InlineData(SocketError.TimedOut, (int)SocketErrorKind.Idle)]
    [InlineData(SocketError.WouldBlock, (int)SocketErrorKind.Idle)]
    [InlineData(SocketError.NoBufferSpaceAvailable, (int)SocketErrorKind.Transient)]
    [InlineData(SocketError.ConnectionReset, (int)SocketErrorKind.Transient)]
    [InlineData(SocketError.MessageSize, (int)SocketErrorKind.Transient)]
    [InlineData(SocketError.OperationAborted, (int)SocketErrorKind.Closed)]
    [InlineData(SocketError.Fault, (int)SocketErrorKind.Unexpected)]
    public void SocketErrorsAreClassified(SocketError error, int kind) =>
        Assert.Equal((SocketErrorKind)kind, SocketErrors.Classify(error));

    [Fact]
    public void EndpointsRoundTripThroughSocketAddresses()
    {
        var endPoint = new IPEndPoint(IPAddress.Loopback, 40_123);
        ulong endpoint = EndpointConversions.FromIPEndPoint(endPoint);
        Assert.Equal(0x7F00_0001UL << 16 | 40_123, endpoint);
        Assert.Equal(endPoint, EndpointConversions.ToIPEndPoint(endpoint));
        Assert.True(EndpointConversions.TryFromSocketAddress(EndpointConversions.ToSocketAddress(endpoint), out ulong back));
        Assert.Equal(endpoint, back);
    }

    [Fact]
    public void OnlyIPv4IsAccepted()
    {
        Assert.Throws<ArgumentException>(() => EndpointConversions.FromIPEndPoint(new IPEndPoint(IPAddress.IPv6Loopback, 1)));
        Assert.Throws<ArgumentException>(() => new UdpTransport(new IPEndPoint(IPAddress.IPv6Loopback, 0), (_, _, _) => { }));
    }
}
