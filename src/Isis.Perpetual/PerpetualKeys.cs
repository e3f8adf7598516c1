using Isis.Core.Wire;

namespace Isis.Perpetual;

/// <summary>
/// One process's own keys in a Perpetual deployment: its MAC key with every other principal, its
/// view-change signing key if it is a replica, and the replicas' public keys. An explicit key set:
/// whoever provisions the deployment holds its key, issues each process its keys
/// (<see cref="PerpetualDeployment.IssueKeys(string, int)"/>, <see cref="PerpetualDeployment.IssueKeys(string)"/>)
/// and gives each host only its own, so a compromised host can speak for itself alone. The host
/// declares the deployment with them (<see cref="PerpetualDeployment(PerpetualKeys)"/>) and starts
/// the replica or client they belong to.
/// </summary>
/// <remarks>
/// Treat <see cref="ToBytes"/> as a private key (a file readable by the service's account only). The
/// keys belong to the deployment they were issued for: the same services, replicas, endpoints and
/// clients. Starting with them in a deployment declared otherwise throws.
/// </remarks>
public sealed class PerpetualKeys
{
    private const byte Version = 1;

    internal PerpetualKeys(string name, int replicaIndex, byte[] deploymentFingerprint, byte[] secret)
    {
        Name = name;
        ReplicaIndex = replicaIndex >= 0 ? replicaIndex : null;
        DeploymentFingerprint = deploymentFingerprint;
        Secret = secret;
    }

    /// <summary>The service (for a replica's keys) or the client these keys belong to.</summary>
    public string Name { get; }

    /// <summary>The replica's index in its service; null for an unreplicated client's keys.</summary>
    public int? ReplicaIndex { get; }

    internal byte[] DeploymentFingerprint { get; }

    internal byte[] Secret { get; }

    /// <summary>These keys as bytes, to store for the process they belong to (<see cref="FromBytes"/> reads them back).</summary>
    public byte[] ToBytes() =>
        new PacketWriter().BeginRecord().U8(Version).String(Name).I32(ReplicaIndex ?? -1).Bytes(DeploymentFingerprint).Bytes(Secret).FinishRecord();

    /// <summary>Keys that <see cref="ToBytes"/> wrote.</summary>
    /// <exception cref="FormatException">The bytes are not Perpetual keys (truncated, altered, or of another version).</exception>
    public static PerpetualKeys FromBytes(byte[] bytes)
    {
        ArgumentNullException.ThrowIfNull(bytes);
        var r = new WireReader(bytes);
        byte version = r.U8();
        string name = r.String(1024);
        int index = r.I32();
        byte[] fingerprint = r.Bytes();
        byte[] secret = r.Bytes();
        if (!r.Complete || version != Version || name.Length == 0 || index < -1 || fingerprint.Length != 32 || Core.Bft.BftKeys.Import(secret) == null)
            throw new FormatException("these bytes are not Perpetual keys written by PerpetualKeys.ToBytes (truncated, altered, or of another version): issue the process's keys again with PerpetualDeployment.IssueKeys");
        return new PerpetualKeys(name, index, fingerprint, secret);
    }

    /// <inheritdoc/>
    public override string ToString() => ReplicaIndex is int i ? $"keys of {Name}[{i}]" : $"keys of client {Name}";
}
