using BenchmarkDotNet.Columns;
using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Diagnosers;
using BenchmarkDotNet.Exporters.Json;

namespace Isis.Benchmarks;

/// <summary>
/// The one configuration every suite uses: the memory diagnoser (allocated bytes and GC counts per
/// operation), median and P50/P95 columns, and GitHub-markdown plus JSON exporters (in
/// BenchmarkDotNet.Artifacts/results) for docs/performance.md. No job is fixed here, so <c>--job Dry</c> or <c>--job short</c> on the
/// command line chooses one; without it BenchmarkDotNet's default job runs. Program.cs hands it
/// to BenchmarkSwitcher, so every suite gets it.
/// </summary>
public sealed class IsisBenchmarkConfig : ManualConfig
{
    public IsisBenchmarkConfig()
    {
        Add(DefaultConfig.Instance); // console logger, default columns, validators
        AddDiagnoser(MemoryDiagnoser.Default);
        AddColumn(StatisticColumn.Median, StatisticColumn.P50, StatisticColumn.P95);
        AddExporter(JsonExporter.Brief); // GitHub markdown comes with the defaults
    }
}
