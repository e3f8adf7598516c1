using Isis.Core.Durability;
using Isis.Core.Identity;
using Isis.Core.Wire;
using Isis.Runtime;

namespace Isis.Tests.Runtime;

/// <summary>The SafeSend history log and its record file on the real disk (the crash points are in <see cref="StoreCrashTests"/>).</summary>
public sealed class HistoryLogFileTests : IDisposable
{
    private readonly DirectoryInfo _directory = Directory.CreateTempSubdirectory("isis-history-log-");

    private string LogPath => Path.Combine(_directory.FullName, "ledger.safelog");

    public void Dispose() => _directory.Delete(recursive: true);

    private static readonly NodeId Member = new(0x7F00_0001_1F90UL, 1);

    private static byte[] View(int founderView) =>
        HistoryLog.View(new PacketWriter(), new HistoryViewRecord(new HistoryViewKey(1, founderView), new Lineage(Member, founderView), Member, [Member]));

    private static byte[] Entry(long index) => HistoryLog.Entry(new PacketWriter(), new HistoryEntry(index, Member, 1, index, 1, [(byte)index, 42]));

    [Fact]
    public void Records_appended_after_an_out_of_place_record_are_read_after_a_restart()
    {
        using (var file = new DurableRecordFile(LogPath))
        {
            foreach (byte[] r in new[] { View(1), Entry(1), Entry(3), Entry(4) }) file.Append(r);
        }
        long intact = new FileInfo(LogPath).Length;
        (HistoryLogFile log, List<byte[]> records) = HistoryLogFile.Open(LogPath);
        using (log)
        {
            Assert.Equal([View(1), Entry(1)], records);
            Assert.Contains("2 record(s) there pass their checksum but are out of place", log.Damage);
            string aside = Assert.Single(Directory.GetFiles(_directory.FullName, "ledger.safelog.damaged-*"));
            Assert.Equal([Entry(3), Entry(4)], DurableRecordFile.Read(aside).Records);
            Assert.True(new FileInfo(LogPath).Length < intact);
            log.Append([Entry(2)]);
            log.Sync();
        }
        (HistoryLogFile again, List<byte[]> restarted) = HistoryLogFile.Open(LogPath);
        using (again)
        {
            Assert.Null(again.Damage);
            Assert.Equal([View(1), Entry(1), Entry(2)], restarted);
            Assert.Equal(0, HistoryLog.Read(restarted).Unreadable);
        }
    }

    [Fact]
    public void A_rewrite_that_keeps_the_old_log_leaves_it_whole_beside_the_new_one()
    {
        (HistoryLogFile log, _) = HistoryLogFile.Open(LogPath);
        string? kept;
        using (log)
        {
            log.Append([View(1), Entry(1), Entry(2)]);
            log.Sync();
            kept = log.Rewrite([View(7), Entry(1)], keepOldAside: true);
            log.Append([Entry(2)]);
            log.Sync();
        }
        Assert.NotNull(kept);
        Assert.Equal([View(1), Entry(1), Entry(2)], DurableRecordFile.Read(kept).Records);
        Assert.Equal([View(7), Entry(1), Entry(2)], DurableRecordFile.Read(LogPath).Records);
        Assert.False(File.Exists(LogPath + ".next"));
    }

    [Fact]
    public void Reading_streams_records_of_any_size_and_stops_at_a_torn_one()
    {
        byte[][] records = [new byte[200_000], [7], new byte[70_000], []];
        for (int i = 0; i < records.Length; i++) Array.Fill(records[i], (byte)(i + 1));
        using (var file = new DurableRecordFile(LogPath))
        {
            foreach (byte[] r in records) file.Append(r);
            file.Append(new byte[5000]);
        }
        long whole = new FileInfo(LogPath).Length;
        using (var f = new FileStream(LogPath, FileMode.Open)) f.SetLength(whole - 100); // the last record torn
        DurableRecordFile.Contents contents = DurableRecordFile.Read(LogPath);
        Assert.Equal(records, contents.Records);
        Assert.Equal([0L, 200_008L, 200_017L, 270_025L], contents.Starts);
        Assert.Equal(whole - 5008, contents.IntactLength);
        Assert.Equal(whole - 100, contents.FileLength);
    }
}
