using Isis.Perpetual;

namespace PaymentChain;

/// <summary>What the front end asks the store.</summary>
public sealed record StoreRequest(string Kind, string Customer, string Item, int Quantity);

/// <summary>The store's answer to an order.</summary>
public sealed record OrderResult(string OrderId, bool Accepted, string Detail, long TotalCents, string PlacedAt);

/// <summary>What the store asks the payment gateway.</summary>
public sealed record Payment(string Card, long AmountCents, string Reference);

/// <summary>The gateway's answer.</summary>
public sealed record PaymentResult(bool Approved, string Detail);

/// <summary>What the gateway asks the bank.</summary>
public sealed record Charge(string Account, long AmountCents, string Reference);

/// <summary>The bank's answer.</summary>
public sealed record ChargeResult(bool Approved, long BalanceCents, string Authorization);

/// <summary>
/// The three replicated services of the paper's payment chain, each one deterministic loop: the
/// same inputs in the same order give the same state and answers at every replica. They read the
/// agreed clock (<see cref="PerpetualReplica.CurrentTime"/>) and random values
/// (<see cref="PerpetualReplica.Random"/>), never the machine's.
/// </summary>
public static class Services
{
    public const string Store = "store", Gateway = "gateway", Bank = "bank";

    /// <summary>
    /// The store: a catalog with stock. An order reserves the stock, asks the gateway for the payment
    /// (asynchronously: it takes the next order meanwhile), then confirms or releases it.
    /// </summary>
    public static async Task StoreLoop(PerpetualReplica r)
    {
        var prices = new Dictionary<string, long> { ["book"] = 12_00, ["lamp"] = 35_00, ["piano"] = 4_000_00 };
        var stock = new Dictionary<string, int> { ["book"] = 10, ["lamp"] = 3, ["piano"] = 1 };
        long orders = 0;
        while (true)
        {
            PerpetualRequest request = await r.ReceiveRequestAsync();
            StoreRequest ask = request.Read<StoreRequest>();
            if (ask.Kind == "stock")
            {
                r.SendReply(new SortedDictionary<string, int>(stock), request);
                continue;
            }
            string orderId = $"order-{++orders}";
            if (!prices.TryGetValue(ask.Item, out long price) || ask.Quantity < 1)
            {
                r.SendReply(new OrderResult(orderId, false, $"no such item: {ask.Item}", 0, Now(r)), request);
                continue;
            }
            if (stock[ask.Item] < ask.Quantity)
            {
                r.SendReply(new OrderResult(orderId, false, $"only {stock[ask.Item]} {ask.Item} left", 0, Now(r)), request);
                continue;
            }
            stock[ask.Item] -= ask.Quantity; // reserved while the payment is out
            _ = Pay(r, request, ask, orderId, price * ask.Quantity, stock);
        }
    }

    private static async Task Pay(PerpetualReplica r, PerpetualRequest request, StoreRequest ask, string orderId, long total, Dictionary<string, int> stock)
    {
        // Generous timeouts: when every tier's primary fails at once, each tier's view change comes in
        // turn (about 3 s on a quiet two-core machine, 7 s seen on a loaded one); the gateway's outlasts the bank's.
        PerpetualReply reply = await r.SendReceiveAsync(Gateway, new Payment("card-" + ask.Customer, total, orderId), TimeSpan.FromSeconds(40));
        PaymentResult payment = reply.Aborted ? new PaymentResult(false, "the payment gateway did not answer in time") : reply.Read<PaymentResult>();
        if (!payment.Approved) stock[ask.Item] += ask.Quantity; // released
        r.SendReply(new OrderResult(orderId, payment.Approved, payment.Detail, payment.Approved ? total : 0, Now(r)), request);
    }

    /// <summary>The payment gateway: checks the card and the limit, and asks the bank to charge the account.</summary>
    public static async Task GatewayLoop(PerpetualReplica r)
    {
        const long limit = 2_000_00;
        while (true)
        {
            PerpetualRequest request = await r.ReceiveRequestAsync();
            Payment payment = request.Read<Payment>();
            if (!payment.Card.StartsWith("card-", StringComparison.Ordinal)) r.SendReply(new PaymentResult(false, "unknown card"), request);
            else if (payment.AmountCents > limit) r.SendReply(new PaymentResult(false, $"over the card's limit of {limit / 100}.00"), request);
            else _ = Charge(r, request, payment);
        }
    }

    private static async Task Charge(PerpetualReplica r, PerpetualRequest request, Payment payment)
    {
        PerpetualReply reply = await r.SendReceiveAsync(Bank, new Charge(payment.Card["card-".Length..], payment.AmountCents, payment.Reference), TimeSpan.FromSeconds(20));
        if (reply.Aborted)
        {
            r.SendReply(new PaymentResult(false, "the bank did not answer in time"), request);
            return;
        }
        ChargeResult charge = reply.Read<ChargeResult>();
        r.SendReply(new PaymentResult(charge.Approved, charge.Approved ? $"charged, authorization {charge.Authorization}" : "declined by the bank: insufficient funds"), request);
    }

    /// <summary>The bank: accounts with balances; a charge is applied once per reference, with an authorization code drawn from the agreed random values.</summary>
    public static async Task BankLoop(PerpetualReplica r)
    {
        var balances = new Dictionary<string, long> { ["alice"] = 500_00, ["bob"] = 40_00, ["carol"] = 10_000_00 };
        var done = new Dictionary<string, ChargeResult>();
        while (true)
        {
            PerpetualRequest request = await r.ReceiveRequestAsync();
            Charge charge = request.Read<Charge>();
            if (!done.TryGetValue(charge.Reference, out ChargeResult? result))
            {
                long balance = balances.GetValueOrDefault(charge.Account);
                bool approved = balance >= charge.AmountCents;
                if (approved) balances[charge.Account] = balance -= charge.AmountCents;
                result = new ChargeResult(approved, balance, approved ? $"A{r.Random.Next(100_000, 1_000_000)}" : "");
                done[charge.Reference] = result;
            }
            r.SendReply(result, request);
        }
    }

    private static string Now(PerpetualReplica r) => r.CurrentTime.ToString("yyyy-MM-dd HH:mm:ss.fff'Z'", System.Globalization.CultureInfo.InvariantCulture);
}
