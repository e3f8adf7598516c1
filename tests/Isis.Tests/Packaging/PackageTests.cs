using System.Diagnostics;
using System.IO.Compression;
using System.Xml.Linq;
using Isis.Tests.Api;
using Isis.Tests.MultiProcess;
using Isis.Tests.Runtime;

namespace Isis.Tests.Packaging;

/// <summary>
/// What a user gets from NuGet: the four packages packed from a copy of the sources (so packing
/// never rebuilds the assemblies this test runs from), checked for their metadata, then a small
/// app outside the repository restores them from a local folder feed, builds, and runs a group
/// through both the Isis2-style API and the hosted one, plus a simulated seed.
/// </summary>
[Collection(MultiProcessCollection.Name)]
public sealed class PackageTests
{
    private static readonly string[] Packages = ["Isis.Core", "Isis", "Isis.Hosting", "Isis.Collections", "Isis.Perpetual", "Isis.Simulation"];

    [Fact]
    public void The_packages_carry_their_metadata_and_an_app_restores_builds_and_runs_against_them_from_a_folder_feed()
    {
        string work = Directory.CreateTempSubdirectory("isis-pack-").FullName;
        // A version no earlier run used, so the NuGet cache cannot hand back an older build of it.
        string version = $"0.1.0-test.{DateTime.UtcNow:yyyyMMddHHmmss}.{Environment.ProcessId}";
        try
        {
            string repo = Path.Combine(work, "repo");
            CopySources(RepoPaths.Root, repo);
            string feed = Path.Combine(work, "feed");
            foreach (string id in Packages)
                Dotnet(repo, "pack", $"src/{id}/{id}.csproj", "-c", "Release", "-o", feed, $"-p:Version={version}", "-p:ContinuousIntegrationBuild=true");

            foreach (string id in Packages)
                CheckPackage(feed, id, version, work);

            string app = Path.Combine(work, "app");
            WriteApp(app, feed, version);
            int port = TestRuntimes.FreeUdpPort();
            string[] perpetualPorts = [.. Enumerable.Range(0, 2).Select(_ => TestRuntimes.FreeUdpPort().ToString(System.Globalization.CultureInfo.InvariantCulture))];
            string output = Dotnet(app, "run", "-c", "Release", "--", port.ToString(System.Globalization.CultureInfo.InvariantCulture), perpetualPorts[0], perpetualPorts[1]);
            Assert.Contains("hosted member received apples x12 from the Isis2-style member", output);
            Assert.Contains("perpetual: 21 doubled is 42", output);
            Assert.Contains("simulation: seed 3 lossy", output);
            Assert.Contains(": ok;", output);
        }
        finally
        {
            Directory.Delete(work, recursive: true);
            string cache = Environment.GetEnvironmentVariable("NUGET_PACKAGES") ?? Path.Combine(Environment.GetFolderPath(Environment.SpecialFolder.UserProfile), ".nuget", "packages");
            foreach (string id in Packages)
            {
                string cached = Path.Combine(cache, id.ToLowerInvariant(), version);
                if (Directory.Exists(cached)) Directory.Delete(cached, recursive: true);
            }
        }
    }

    private static void CheckPackage(string feed, string id, string version, string work)
    {
        string nupkg = Path.Combine(feed, $"{id}.{version}.nupkg");
        Assert.True(File.Exists(nupkg), $"{nupkg} was not packed");
        Assert.True(File.Exists(Path.Combine(feed, $"{id}.{version}.snupkg")), $"{id} has no symbol package");

        using ZipArchive zip = ZipFile.OpenRead(nupkg);
        XDocument nuspec;
        using (Stream s = zip.Entries.Single(e => e.FullName.EndsWith(".nuspec", StringComparison.Ordinal)).Open()) nuspec = XDocument.Load(s);
        XElement metadata = nuspec.Root!.Elements().Single(e => e.Name.LocalName == "metadata");
        string? Meta(string name) => metadata.Elements().SingleOrDefault(e => e.Name.LocalName == name)?.Value;
        XElement? MetaElement(string name) => metadata.Elements().SingleOrDefault(e => e.Name.LocalName == name);

        Assert.Equal(id, Meta("id"));
        Assert.Equal(version, Meta("version"));
        Assert.Equal("MIT", Meta("license"));
        Assert.Equal("expression", MetaElement("license")!.Attribute("type")!.Value);
        Assert.False(string.IsNullOrWhiteSpace(Meta("description")), $"{id} has no description");
        Assert.Contains("virtual-synchrony", Meta("tags"));
        Assert.Equal("README.md", Meta("readme"));
        Assert.Contains($"# {id}", Read(zip, "README.md"));
        Assert.Contains("MIT License", Read(zip, "LICENSE"));
        XElement repository = MetaElement("repository") ?? throw new Xunit.Sdk.XunitException($"{id} has no repository element");
        Assert.Equal("git", repository.Attribute("type")?.Value);
        Assert.Matches("^[0-9a-f]{40}$", repository.Attribute("commit")?.Value ?? "");

        // The assembly, its XML docs, and a build whose paths are normalized (deterministic on any machine).
        ZipArchiveEntry dll = zip.GetEntry($"lib/net10.0/{id}.dll") ?? throw new Xunit.Sdk.XunitException($"{id}.dll is not in lib/net10.0");
        Assert.NotNull(zip.GetEntry($"lib/net10.0/{id}.xml"));
        using var bytes = new MemoryStream();
        using (Stream s = dll.Open()) s.CopyTo(bytes);
        string text = System.Text.Encoding.UTF8.GetString(bytes.ToArray());
        Assert.DoesNotContain(work, text);

        // Dependencies: each package on the ones it is built from, at the same version.
        string[] dependencies = [.. metadata.Descendants().Where(e => e.Name.LocalName == "dependency").Select(e => $"{e.Attribute("id")!.Value} {e.Attribute("version")!.Value}")];
        string[] expected = id switch
        {
            "Isis" => [$"Isis.Core {version}", "MessagePack 2.5.307"],
            "Isis.Hosting" => [$"Isis {version}"],
            "Isis.Collections" => [$"Isis {version}"],
            "Isis.Perpetual" => [$"Isis {version}"],
            "Isis.Simulation" => [$"Isis.Core {version}"],
            _ => [],
        };
        foreach (string dependency in expected)
            Assert.Contains(dependency, dependencies);
    }

    private static string Read(ZipArchive zip, string entry)
    {
        using var reader = new StreamReader((zip.GetEntry(entry) ?? throw new Xunit.Sdk.XunitException($"{entry} is not in the package")).Open());
        return reader.ReadToEnd();
    }

    /// <summary>An app outside the repository, so nothing of the repository's build settings applies to it.</summary>
    private static void WriteApp(string app, string feed, string version)
    {
        Directory.CreateDirectory(app);
        File.WriteAllText(Path.Combine(app, "nuget.config"), $"""
            <?xml version="1.0" encoding="utf-8"?>
            <configuration>
              <packageSources>
                <add key="isis-local" value="{feed}" />
              </packageSources>
            </configuration>
            """);
        File.WriteAllText(Path.Combine(app, "PackagedApp.csproj"), $"""
            <Project Sdk="Microsoft.NET.Sdk">
              <PropertyGroup>
                <OutputType>Exe</OutputType>
                <TargetFramework>net10.0</TargetFramework>
                <Nullable>enable</Nullable>
                <ImplicitUsings>enable</ImplicitUsings>
                <TreatWarningsAsErrors>true</TreatWarningsAsErrors>
              </PropertyGroup>
              <ItemGroup>
                <PackageReference Include="Isis.Hosting" Version="{version}" />
                <PackageReference Include="Isis.Perpetual" Version="{version}" />
                <PackageReference Include="Isis.Simulation" Version="{version}" />
                <PackageReference Include="Microsoft.Extensions.Hosting" Version="10.0.14" />
              </ItemGroup>
            </Project>
            """);
        File.WriteAllText(Path.Combine(app, "Program.cs"), """
            using Isis;
            using Isis.Simulation;
            using Microsoft.Extensions.DependencyInjection;
            using Microsoft.Extensions.Hosting;

            int servicePort = int.Parse(args[0], System.Globalization.CultureInfo.InvariantCulture);
            var received = new TaskCompletionSource<Order>(TaskCreationOptions.RunContinuationsAsynchronously);

            // A hosted member (Isis.Hosting): its group joins when the host starts.
            var builder = Host.CreateApplicationBuilder();
            builder.Services.AddIsis(o => o.MembershipServicePort = servicePort)
                .AddGroup("orders", (sp, g) => g.Handlers[1] += (Action<Order>)(o => received.TrySetResult(o)));
            using IHost host = builder.Build();
            await host.StartAsync();

            // A second member in the Isis2 style (Isis), sending a plain record as MessagePack.
            var runtime = new IsisRuntime(new IsisOptions { MembershipServicePort = servicePort });
            runtime.Start();
            var group = new Group(runtime, "orders");
            group.Join();
            group.Send(1, new Order("apples", 12));
            Order order = await received.Task.WaitAsync(TimeSpan.FromSeconds(60));
            Console.WriteLine($"hosted member received {order.Item} x{order.Count} from the Isis2-style member");
            group.Leave();
            runtime.Shutdown();
            await host.StopAsync();

            // A Byzantine fault-tolerant service of one replica and its client (Isis.Perpetual).
            var deployment = new Isis.Perpetual.PerpetualDeployment(new byte[32])
                .AddService("doubler", new System.Net.IPEndPoint(System.Net.IPAddress.Loopback, int.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture)))
                .AddClient("front", new System.Net.IPEndPoint(System.Net.IPAddress.Loopback, int.Parse(args[2], System.Globalization.CultureInfo.InvariantCulture)));
            using (var replica = Isis.Perpetual.PerpetualReplica.Start(deployment, "doubler", 0, async r =>
            {
                while (true)
                {
                    var request = await r.ReceiveRequestAsync();
                    r.SendReply(request.Read<int>() * 2, request);
                }
            }))
            using (var client = new Isis.Perpetual.PerpetualClient(deployment, "front", "doubler"))
                Console.WriteLine($"perpetual: 21 doubled is {await client.InvokeAsync<int, int>(21).WaitAsync(TimeSpan.FromSeconds(60))}");

            // The simulator (Isis.Simulation).
            SimulationOutcome outcome = ProtocolSimulation.Run(3, "lossy");
            Console.WriteLine($"simulation: {outcome.Summary}");
            return outcome.Passed ? 0 : 1;

            public sealed record Order(string Item, int Count);
            """);
    }

    /// <summary>What packing needs: the four libraries (without build output) and the repository's build settings.</summary>
    private static void CopySources(string root, string target)
    {
        foreach (string file in (string[])["Directory.Build.props", "Directory.Packages.props", "global.json", "LICENSE"])
        {
            Directory.CreateDirectory(target);
            File.Copy(Path.Combine(root, file), Path.Combine(target, file));
        }
        foreach (string id in Packages)
            CopyTree(Path.Combine(root, "src", id), Path.Combine(target, "src", id));
        // Source Link and the package's repository element read the commit from git: give the copy
        // the repository's history by pointing a fresh repository at it.
        Git(target, "init", "-q");
        Git(target, "fetch", "-q", "--depth=1", root, "HEAD");
        Git(target, "update-ref", "HEAD", "FETCH_HEAD");
    }

    private static void CopyTree(string from, string to)
    {
        Directory.CreateDirectory(to);
        foreach (string file in Directory.GetFiles(from))
            File.Copy(file, Path.Combine(to, Path.GetFileName(file)));
        foreach (string dir in Directory.GetDirectories(from))
        {
            string name = Path.GetFileName(dir);
            if (name is "bin" or "obj") continue;
            CopyTree(dir, Path.Combine(to, name));
        }
    }

    private static string Git(string cwd, params string[] args) => Run("git", cwd, args);

    private static string Dotnet(string cwd, params string[] args) => Run("dotnet", cwd, args);

    private static string Run(string program, string cwd, string[] args)
    {
        var psi = new ProcessStartInfo(program) { WorkingDirectory = cwd, UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (string a in args) psi.ArgumentList.Add(a);
        psi.Environment["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1";
        psi.Environment["DOTNET_NOLOGO"] = "1";
        using Process p = Process.Start(psi)!;
        Task<string> stdout = p.StandardOutput.ReadToEndAsync(), stderr = p.StandardError.ReadToEndAsync();
        if (!p.WaitForExit(TimeSpan.FromMinutes(5)))
        {
            p.Kill(entireProcessTree: true);
            Assert.Fail($"{program} {string.Join(' ', args)} did not finish within 5 minutes:\n{stdout.Result}{stderr.Result}");
        }
        string output = stdout.Result + stderr.Result;
        Assert.True(p.ExitCode == 0, $"{program} {string.Join(' ', args)} exited with {p.ExitCode}:\n{output}");
        return output;
    }
}
