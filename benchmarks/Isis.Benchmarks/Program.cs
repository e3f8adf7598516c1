using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Running;
using Isis.Benchmarks;

// Hot-path suites in one process (see docs/performance.md). Run from the repository root (BenchmarkDotNet
// looks for the project file below the current directory):
//   dotnet run -c Release --project benchmarks/Isis.Benchmarks -- --filter '*Codec*'
//   dotnet run -c Release --project benchmarks/Isis.Benchmarks -- --filter '*'
// CI smoke run (each benchmark once, in this process, no separate build; seconds, not minutes):
//   dotnet run -c Release --project benchmarks/Isis.Benchmarks -- --dry --filter '*'
// which is BenchmarkDotNet's own "--job Dry" plus the in-process toolchain.
// Where the Send path allocates, by type and thread (not a BenchmarkDotNet run):
//   dotnet run -c Release --project benchmarks/Isis.Benchmarks -- --allocations [--messages N] [--payload BYTES]
if (args.Contains("--allocations")) return AllocationProfile.Run(args);
IConfig config = new IsisBenchmarkConfig();
if (args.Contains("--dry"))
{
    args = [.. args.Where(a => a != "--dry"), "--job", "Dry", "--inProcess"];
}
var summaries = BenchmarkSwitcher.FromAssembly(typeof(IsisBenchmarkConfig).Assembly).Run(args, config);
// A benchmark that failed to build or threw has no result: fail the run so CI notices.
bool failed = summaries.Any(s => s.HasCriticalValidationErrors || s.Reports.Length == 0 || s.Reports.Any(r => !r.Success));
return failed ? 1 : 0;
