using Isis.Dispatch;
using Isis.Serialization;
using Isis.Tests.Serialization;

namespace Isis.Tests.Dispatch;

public delegate void OrderHandler(string item, int count);

public delegate void RefHandler(ref int value);

public delegate void OutHandler(out int value);

public delegate void TenHandler(int a, int b, int c, int d, int e, int f, int g, int h, int i, string j);

public sealed class HandlerTableTests
{
    private const int Update = 7;

    private static DispatchResult Send(HandlerTable table, int opcode, params object?[] args) =>
        table.Dispatch(ArgumentCodec.Encode(opcode, args));

    [Fact]
    public void Isis2_style_handler_receives_its_arguments()
    {
        var table = new HandlerTable();
        var stock = new Dictionary<string, int>();
        table.Register(Update, (Action<string, int>)((item, count) => stock[item] = count));

        var result = Send(table, Update, "apples", 12);

        Assert.Equal(DispatchOutcome.Invoked, result.Outcome);
        Assert.Equal(1, result.InvokedCount);
        Assert.True(result.Succeeded);
        Assert.Equal(12, stock["apples"]);
    }

    [Fact]
    public void Handlers_of_every_arity_from_0_to_10_are_invoked()
    {
        var table = new HandlerTable();
        var seen = new List<string>();
        table.Register(0, (Action)(() => seen.Add("0")));
        table.Register(1, (Action<int>)(a => seen.Add($"1:{a}")));
        table.Register(2, (Action<int, int>)((a, b) => seen.Add($"2:{a + b}")));
        table.Register(3, (Action<int, int, int>)((a, b, c) => seen.Add($"3:{a + b + c}")));
        table.Register(4, (Action<int, int, int, int>)((a, b, c, d) => seen.Add($"4:{a + b + c + d}")));
        table.Register(5, (Action<int, int, int, int, int>)((a, b, c, d, e) => seen.Add($"5:{a + b + c + d + e}")));
        table.Register(6, (Action<int, int, int, int, int, int>)((a, b, c, d, e, f) => seen.Add($"6:{a + b + c + d + e + f}")));
        table.Register(7, (Action<int, int, int, int, int, int, int>)((a, b, c, d, e, f, g) => seen.Add($"7:{a + b + c + d + e + f + g}")));
        table.Register(8, (Action<int, int, int, int, int, int, int, int>)((a, b, c, d, e, f, g, h) => seen.Add($"8:{a + b + c + d + e + f + g + h}")));
        table.Register(9, (Action<int, int, int, int, int, int, int, int, string>)((a, b, c, d, e, f, g, h, s) => seen.Add($"9:{a + h}{s}")));
        table.Register(10, (TenHandler)((a, b, c, d, e, f, g, h, i, j) => seen.Add($"10:{a + i}{j}")));

        for (int n = 0; n <= 8; n++)
        {
            var args = Enumerable.Repeat<object?>(1, n).ToArray();
            Assert.Equal(DispatchOutcome.Invoked, Send(table, n, args).Outcome);
        }
        Assert.True(Send(table, 9, 1, 2, 3, 4, 5, 6, 7, 8, "!").Succeeded);
        Assert.True(Send(table, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, "?").Succeeded);

        Assert.Equal(["0", "1:1", "2:2", "3:3", "4:4", "5:5", "6:6", "7:7", "8:8", "9:9!", "10:10?"], seen);
    }

    [Fact]
    public void User_delegate_types_anonymous_methods_and_funcs_work()
    {
        var table = new HandlerTable();
        var seen = new List<string>();
        table.Register(Update, (OrderHandler)((item, count) => seen.Add($"{item}={count}")));
        table.Register(Update, (OrderHandler)delegate (string item, int count) { seen.Add($"anon {item}"); });
        table.Register(Update, (Func<string, int, int>)((item, count) =>
        {
            seen.Add("func");
            return count * 2;
        }));

        var result = Send(table, Update, "pears", 3);

        Assert.Equal(3, result.InvokedCount);
        Assert.Equal(["pears=3", "anon pears", "func"], seen);
    }

    [Fact]
    public void Static_method_groups_work()
    {
        var table = new HandlerTable();
        table.Register(1, (Func<int, string>)Convert.ToString);
        Assert.True(Send(table, 1, 5).Succeeded);
    }

    [Fact]
    public void Dispatch_picks_handlers_by_exact_signature_in_registration_order()
    {
        var table = new HandlerTable();
        var seen = new List<string>();
        table.Register(Update, (Action<string, int>)((s, i) => seen.Add("A(string,int)")));
        table.Register(Update, (Action<int>)(i => seen.Add("B(int)")));
        table.Register(Update, (Action<long>)(l => seen.Add("C(long)")));
        table.Register(Update, (Action<string, int>)((s, i) => seen.Add("D(string,int)")));
        table.Register(Update, (Action<string>)(s => seen.Add("E(string)")));

        Assert.Equal(2, Send(table, Update, "x", 1).InvokedCount);
        Assert.Equal(["A(string,int)", "D(string,int)"], seen);

        seen.Clear();
        Assert.Equal(1, Send(table, Update, 5).InvokedCount);
        Assert.Equal(["B(int)"], seen);

        seen.Clear();
        Assert.Equal(1, Send(table, Update, 5L).InvokedCount);
        Assert.Equal(["C(long)"], seen);
    }

    [Fact]
    public void Null_matches_reference_and_nullable_parameters_but_not_value_types()
    {
        var table = new HandlerTable();
        var seen = new List<string>();
        table.Register(1, (Action<string?>)(s => seen.Add($"string:{s ?? "null"}")));
        table.Register(1, (Action<int?>)(i => seen.Add($"int?:{i?.ToString() ?? "null"}")));
        table.Register(1, (Action<Order?>)(o => seen.Add("order")));
        table.Register(1, (Action<int>)(i => seen.Add("int")));

        Assert.Equal(3, Send(table, 1, [null]).InvokedCount);
        Assert.Equal(["string:null", "int?:null", "order"], seen);

        seen.Clear();
        Assert.Equal(2, Send(table, 1, 4).InvokedCount);
        Assert.Equal(["int?:4", "int"], seen);
    }

    [Fact]
    public void Mismatch_names_both_signatures()
    {
        var table = new HandlerTable();
        table.Register(Update, (Action<string, int>)((_, _) => Assert.Fail("must not run")));

        var result = Send(table, Update, 12);

        Assert.Equal(DispatchOutcome.SignatureMismatch, result.Outcome);
        Assert.Equal(
            "opcode 7: received (int) but handlers are registered for (string, int); check that Send's arguments match the handler's parameter types",
            result.Message);
    }

    [Fact]
    public void Mismatch_lists_every_distinct_signature()
    {
        var table = new HandlerTable();
        table.Register(3, (Action<string, int>)((_, _) => { }));
        table.Register(3, (Action<string, int>)((_, _) => { }));
        table.Register(3, (Action<List<long>>)(_ => { }));
        var result = Send(table, 3, new List<int> { 1 });
        Assert.Contains("received (List<int>) but handlers are registered for (string, int) or (List<long>)", result.Message);
    }

    [Fact]
    public void Unknown_opcode_and_garbage_are_reported()
    {
        var table = new HandlerTable();
        table.Register(1, (Action)(() => { }));

        var none = Send(table, 2);
        Assert.Equal(DispatchOutcome.NoHandlerForOpcode, none.Outcome);
        Assert.Equal(2, none.Opcode);
        Assert.Contains("g.Handlers[2]", none.Message);

        var garbage = table.Dispatch(new byte[] { 0x93, 1, 99, 0 }); // [1, tag 99, 0]
        Assert.Equal(DispatchOutcome.Malformed, garbage.Outcome);
        Assert.Equal(1, garbage.Opcode);
        Assert.Contains("unknown type tag 99", garbage.Message);

        Assert.Equal(DispatchOutcome.Malformed, table.Dispatch(Array.Empty<byte>()).Outcome);
    }

    [Fact]
    public void Handler_exceptions_are_returned_not_thrown_and_stop_later_handlers()
    {
        var table = new HandlerTable();
        var seen = new List<string>();
        var boom = new InvalidOperationException("boom");
        table.Register(1, (Action<int>)(_ => seen.Add("first")));
        table.Register(1, (Action<int>)(_ => throw boom));
        table.Register(1, (Action<int>)(_ => seen.Add("third")));

        var result = Send(table, 1, 1);

        Assert.Equal(DispatchOutcome.HandlerThrew, result.Outcome);
        Assert.Same(boom, result.Exception);
        Assert.Equal(1, result.InvokedCount);
        Assert.Contains("handler (int) threw InvalidOperationException: boom", result.Message);
        Assert.Equal(["first"], seen);
    }

    [Fact]
    public void Values_that_fail_to_decode_run_no_handler_at_all()
    {
        var table = new HandlerTable();
        var ran = false;
        table.Register(1, (Action<Order>)(_ => ran = true));
        table.Register(1, (Action<Order>)(_ => ran = true));
        // Order's descriptor, but a string where Order's map of members belongs.
        var payload = new PayloadBuilder(1, 1).Keyed(TypeTag.Object, typeof(Order).FullName!).Str("not an order").ToArray();

        var result = table.Dispatch(payload);

        Assert.Equal(DispatchOutcome.Malformed, result.Outcome);
        Assert.Contains("argument 0", result.Message);
        Assert.False(ran);
    }

    [Fact]
    public void Each_handler_gets_its_own_copy_of_the_arguments()
    {
        var table = new HandlerTable();
        List<int>? first = null, second = null;
        table.Register(1, (Action<List<int>>)(l => { first = l; l.Add(99); }));
        table.Register(1, (Action<List<int>>)(l => second = l));

        Send(table, 1, new List<int> { 1 });

        Assert.NotSame(first, second);
        Assert.Equal([1], second!);
    }

    [Fact]
    public void Records_enums_and_collections_dispatch()
    {
        var table = new HandlerTable();
        Order? got = null;
        Color color = default;
        int[][]? grid = null;
        table.Register(1, (Action<Order, Color, int[][]>)((o, c, g) => (got, color, grid) = (o, c, g)));

        var result = Send(table, 1, new Order("plums", 7, ["ripe"], 3.5m), Color.Blue, new[] { new[] { 1 }, new[] { 2, 3 } });

        Assert.True(result.Succeeded, result.ToString());
        Assert.Equal("plums", got!.Item);
        Assert.Equal(Color.Blue, color);
        Assert.Equal(3, grid![1][1]);
    }

    [Fact]
    public void Unregister_removes_the_last_equal_delegate()
    {
        var table = new HandlerTable();
        var count = 0;
        Action<int> handler = _ => count++;
        table.Register(1, handler);
        table.Register(1, handler);
        Assert.Equal(2, table.Count(1));

        Assert.True(table.Unregister(1, handler));
        Assert.Equal(1, Send(table, 1, 0).InvokedCount);
        Assert.True(table.Unregister(1, handler));
        Assert.False(table.Unregister(1, handler));
        Assert.False(table.Unregister(2, handler));
        Assert.Equal(DispatchOutcome.NoHandlerForOpcode, Send(table, 1, 0).Outcome);
        Assert.Equal(1, count);
    }

    public static TheoryData<Delegate, string> BadHandlers() => new()
    {
        { (RefHandler)((ref int v) => { }), "ref/out/in" },
        { (OutHandler)((out int v) => v = 0), "ref/out/in" },
        { (Action<object>)(_ => { }), "too general" },
        { (Action<IList<int>>)(_ => { }), "declare a concrete type" },
        { (Action<System.IO.Stream>)(_ => { }), "abstract" },
        { (Action<int[,]>)(_ => { }), "jagged" },
        { (Action<Action>)(_ => { }), "delegates" },
        { (Action<nint>)(_ => { }), "native-sized" },
        { (Action<List<object>>)(_ => { }), "element type object" },
    };

    [Theory]
    [MemberData(nameof(BadHandlers))]
    public void Register_rejects_parameters_that_can_never_be_received(Delegate handler, string expected)
    {
        var table = new HandlerTable();
        var e = Assert.Throws<ArgumentException>(() => table.Register(4, handler));
        Assert.Contains("opcode 4", e.Message);
        Assert.Contains(expected, e.Message);
        Assert.Equal(0, table.Count(4));
    }

    [Fact]
    public void Register_rejects_null_and_too_many_parameters()
    {
        var table = new HandlerTable();
        Assert.Throws<ArgumentNullException>(() => table.Register(1, null!));
        var tooMany = System.Linq.Expressions.Expression.GetDelegateType([.. Enumerable.Repeat(typeof(int), 33), typeof(void)]);
        var parameters = Enumerable.Range(0, 33).Select(i => System.Linq.Expressions.Expression.Parameter(typeof(int))).ToArray();
        var d = System.Linq.Expressions.Expression.Lambda(tooMany, System.Linq.Expressions.Expression.Empty(), parameters).Compile();
        Assert.Contains("at most 32", Assert.Throws<ArgumentException>(() => table.Register(1, d)).Message);
    }

    [Fact]
    public async Task Registration_while_dispatching_is_safe()
    {
        var table = new HandlerTable();
        int calls = 0;
        table.Register(1, (Action<int>)(_ => Interlocked.Increment(ref calls)));
        var payload = ArgumentCodec.Encode(1, [1]);
        using var stop = new CancellationTokenSource();

        var dispatcher = Task.Run(() =>
        {
            int runs = 0;
            while (!stop.IsCancellationRequested || runs < 1000)
            {
                var r = table.Dispatch(payload);
                Assert.Equal(DispatchOutcome.Invoked, r.Outcome);
                runs++;
            }
        });
        for (int i = 0; i < 200; i++)
        {
            Action<int> extra = _ => Interlocked.Increment(ref calls);
            table.Register(1, extra);
            table.Register(2, (Action)(() => { }));
            Assert.True(table.Unregister(1, extra));
        }
        stop.Cancel();
        await dispatcher.WaitAsync(TimeSpan.FromSeconds(30));

        Assert.Equal(1, table.Count(1));
        Assert.Equal(200, table.Count(2));
        Assert.True(calls >= 1000);
    }
}
