// The simulator's command line: run a range of seeds, replay one seed with its event log, or
// measure a large group in virtual time.
//   dotnet run --project tools/Isis.Sim -- run --seeds 0..299
//   dotnet run --project tools/Isis.Sim -- replay --seed 42 --scenario chaos [--log run.jsonl]
//   dotnet run -c Release --project tools/Isis.Sim -- scale --members 1000 [--seed S] [--replicas 1|3]
//       [--window-ms 100] [--sends 2] [--senders S] [--delay-us 50-200] [--loss 0.1] [--suspicion K] [--digests all|gossip]
//       [--multicast] [--check [--log run.jsonl]] [--json FILE] [--steady-s 600]
// --mutation NAME runs a deliberately broken protocol variant (see ProtocolMutations), to watch the checker catch it.
// scale: N processes with the default protocol options join one group on a perfect network (50-200 us
// delays), every member sends, one member is killed; it prints the formation time and view changes,
// memory and packets per member, delivery and stability times, and the time to the view without the
// killed member, all in virtual time, plus the wall-clock time (see ScaleExperiment and docs/performance.md).
// The commands live in Isis.Simulation (SimCommand), the surface this tool uses: it sees none of the core's internals.
return Isis.Simulation.SimCommand.Run(args);
