using System.Text;

namespace Isis.Core.Identity;

/// <summary>
/// A group's identity on the wire: a 64-bit FNV-1a hash of its UTF-8 name. The name itself travels
/// only in join requests, so every data packet carries 8 bytes instead of a string.
/// </summary>
internal readonly record struct GroupId(ulong Value)
{
    public static GroupId FromName(string name)
    {
        ArgumentNullException.ThrowIfNull(name);
        ulong hash = 14695981039346656037UL;
        foreach (byte b in Encoding.UTF8.GetBytes(name))
        {
            hash ^= b;
            hash *= 1099511628211UL;
        }
        // 0 is reserved for "no group" (process-level packets).
        return new GroupId(hash == 0 ? 1 : hash);
    }

    public override string ToString() => Value.ToString("x16");
}
