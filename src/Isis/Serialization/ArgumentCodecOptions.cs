namespace Isis.Serialization;

/// <summary>Limits applied when encoding arguments. Immutable so one instance can be shared.</summary>
internal sealed class ArgumentCodecOptions
{
    public const int DefaultMaxPayloadBytes = 16 * 1024 * 1024;

    public static readonly ArgumentCodecOptions Default = new();

    /// <summary>Largest encoded payload, header included. Oversized messages fail at the call that sends them.</summary>
    public int MaxPayloadBytes
    {
        get;
        init
        {
            ArgumentOutOfRangeException.ThrowIfLessThan(value, ArgumentCodec.MaxHeaderBytes);
            field = value;
        }
    } = DefaultMaxPayloadBytes;
}
