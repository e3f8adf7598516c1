using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Reflection;
using Microsoft.Extensions.Configuration;

namespace Isis.Hosting;

/// <summary>
/// Binds a configuration section (the "Isis" section of appsettings.json) onto
/// <see cref="IsisOptions"/> itself, so a new runtime setting is bindable the day it is added.
/// <para>
/// ConfigurationBinder converts numbers, durations, enums and strings; it cannot read what the
/// runtime takes as .NET types (IPv4 addresses, "address:port" endpoints, base64 keys), so those
/// are read here, with messages that name the setting and say what a good value looks like.
/// Unknown keys are errors: a misspelt setting would otherwise be ignored silently.
/// </para>
/// </summary>
internal static class IsisConfigurationBinder
{
    /// <summary>The host's own setting, read by <see cref="IsisHostedService"/>; every other key is the runtime's.</summary>
    internal const string StopApplicationOnShutdown = "StopApplicationOnShutdown";

    /// <summary>Sets the properties of <paramref name="options"/> named by the section's keys.</summary>
    /// <exception cref="ArgumentException">A key is not a setting, or its value cannot be read; the message names it.</exception>
    public static void Bind(IConfiguration section, IsisOptions options)
    {
        BindObject(section, options, hostKeys: [StopApplicationOnShutdown]);
        ReadStopApplicationOnShutdown(section); // a bad value fails the start here, with the others, not when the lifetime starts
    }

    /// <summary>Reads the host's own setting (true unless the section says otherwise).</summary>
    public static bool ReadStopApplicationOnShutdown(IConfiguration section)
    {
        IConfigurationSection value = section.GetSection(StopApplicationOnShutdown);
        return value.Value is null || (bool)Convert(value, typeof(bool), current: null)!;
    }

    private static void BindObject(IConfiguration section, object target, string[] hostKeys)
    {
        PropertyInfo[] settings = target.GetType().GetProperties(BindingFlags.Public | BindingFlags.Instance)
            .Where(p => p.SetMethod is { IsPublic: true } && (!p.PropertyType.IsInterface || IsList(p.PropertyType))) // not the logger and meter factories
            .ToArray();
        foreach (IConfigurationSection child in section.GetChildren())
        {
            if (hostKeys.Contains(child.Key, StringComparer.OrdinalIgnoreCase)) continue;
            PropertyInfo setting = settings.FirstOrDefault(p => string.Equals(p.Name, child.Key, StringComparison.OrdinalIgnoreCase))
                ?? throw new ArgumentException($"{child.Path} is not an Isis setting; the settings here are {string.Join(", ", settings.Select(p => p.Name).Concat(hostKeys))}.");
            setting.SetValue(target, Convert(child, setting.PropertyType, setting.GetValue(target)));
        }
    }

    private static bool IsList(Type type) => type == typeof(IList<IPEndPoint>) || type == typeof(IList<byte[]>);

    private static object? Convert(IConfigurationSection value, Type type, object? current)
    {
        if (type == typeof(IPAddress)) return Address(value);
        if (type == typeof(byte[])) return Key(value);
        if (type == typeof(IList<IPEndPoint>)) return Items(value).Select(EndPoint).ToList();
        if (type == typeof(IList<byte[]>))
        {
            return Items(value).Select(k => Key(k) ?? throw new ArgumentException($"{k.Path} is empty; list only keys.")).ToList();
        }
        if (type == typeof(MulticastOptions))
        {
            // A section present at all turns multicast on, with the defaults for what it leaves out.
            var multicast = (MulticastOptions?)current ?? new MulticastOptions();
            BindObject(value, multicast, hostKeys: []);
            return multicast;
        }
        bool hasItems = value.GetChildren().Any();
        if (value.Value is null && !hasItems) return current; // a key with no value leaves the default
        if (value.Value is null)
            throw new ArgumentException($"{value.Path} takes one value, not a section.");
        try
        {
            // Numbers, durations ("00:00:00.100"), enums by name, strings and nullables: the library's own conversion.
            return value.Get(type);
        }
        catch (InvalidOperationException e)
        {
            throw new ArgumentException($"{value.Path} must be {Describe(type)}; it is '{value.Value}'.", e);
        }
    }

    /// <summary>A list's items ("Isis:MembershipSeeds:0", ":1" ...), or a single value given as the whole list.</summary>
    private static IEnumerable<IConfigurationSection> Items(IConfigurationSection list) =>
        list.Value is { Length: > 0 } ? [list] : list.GetChildren();

    private static string Describe(Type type)
    {
        Type t = Nullable.GetUnderlyingType(type) ?? type;
        if (t == typeof(TimeSpan)) return "a duration such as 00:00:00.100";
        if (t == typeof(bool)) return "true or false";
        if (t.IsEnum) return "one of " + string.Join(", ", Enum.GetNames(t));
        return t == typeof(int) ? "a whole number" : "a " + t.Name;
    }

    private static byte[]? Key(IConfigurationSection value)
    {
        if (string.IsNullOrWhiteSpace(value.Value)) return null;
        byte[] key;
        try
        {
            key = System.Convert.FromBase64String(value.Value);
        }
        catch (FormatException)
        {
            throw new ArgumentException($"{value.Path} must be the base64 of 32 random bytes (for example Convert.ToBase64String(RandomNumberGenerator.GetBytes(32))); it is not base64.");
        }
        return key.Length == 32 ? key : throw new ArgumentException($"{value.Path} must be the base64 of 32 bytes (a 256-bit key); it decodes to {key.Length}.");
    }

    private static IPAddress? Address(IConfigurationSection value)
    {
        if (string.IsNullOrWhiteSpace(value.Value)) return null; // the option's own check says whether it may be absent
        return IPAddress.TryParse(value.Value, out IPAddress? a) && a.AddressFamily == AddressFamily.InterNetwork
            ? a
            : throw new ArgumentException($"{value.Path} must be an IPv4 address such as 10.0.1.17; it is '{value.Value}'.");
    }

    private static IPEndPoint EndPoint(IConfigurationSection value) =>
        IPEndPoint.TryParse(value.Value ?? "", out IPEndPoint? e) && e.AddressFamily == AddressFamily.InterNetwork && e.Port != 0
            ? e
            : throw new ArgumentException(string.Create(CultureInfo.InvariantCulture,
                $"{value.Path} must be an IPv4 address with a port such as 10.0.0.1:7345; it is '{value.Value}'."));
}
