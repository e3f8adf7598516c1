using Isis.Core.Node;

namespace Isis.Perpetual.Runtime;

/// <summary>
/// What a replica or client did besides the protocol's own events, for a recorder that feeds real
/// runs to the simulator's checker (the multi-process tests): the checker reads the same events
/// from real processes as from simulated ones.
/// </summary>
internal sealed record PerpetualAnswered(int Client, long Number, byte[] Result) : NodeEvent;

/// <summary>A replica's loop called <paramref name="Target"/> (call <paramref name="Number"/>, with <paramref name="Operation"/>).</summary>
internal sealed record PerpetualCalled(string Target, long Number, byte[] Operation) : NodeEvent;

/// <summary>A client sent request <paramref name="Number"/> with <paramref name="Operation"/> as principal <paramref name="Client"/>.</summary>
internal sealed record PerpetualIssued(int Client, long Number, byte[] Operation) : NodeEvent;
