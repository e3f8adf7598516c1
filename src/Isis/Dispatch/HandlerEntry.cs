using System.Linq.Expressions;
using System.Reflection;
using Isis.Serialization;

namespace Isis.Dispatch;

/// <summary>
/// One registered handler: its parameter shapes for matching and an invoker compiled once, so
/// delivery calls the delegate directly instead of through reflection.
/// </summary>
internal sealed class HandlerEntry
{
    private HandlerEntry(Delegate handler, ParameterShape[] parameters, Action<object?[]> invoker, string signature)
    {
        Handler = handler;
        Parameters = parameters;
        Invoker = invoker;
        Signature = signature;
    }

    public Delegate Handler { get; }

    public ParameterShape[] Parameters { get; }

    /// <summary>Calls <see cref="Handler"/> with unboxed arguments; a Func's result is discarded.</summary>
    public Action<object?[]> Invoker { get; }

    /// <summary>"(string, int)", for diagnostics.</summary>
    public string Signature { get; }

    /// <summary>Validates the handler's signature; throws <see cref="ArgumentException"/> saying what to change.</summary>
    public static HandlerEntry Create(int opcode, Delegate handler)
    {
        ArgumentNullException.ThrowIfNull(handler);
        var delegateType = handler.GetType();
        var invoke = delegateType.GetMethod("Invoke", BindingFlags.Public | BindingFlags.Instance)
            ?? throw new ArgumentException($"Handler for opcode {opcode}: delegate type {delegateType} has no Invoke method.", nameof(handler));
        if (delegateType.ContainsGenericParameters || handler.Method.ContainsGenericParameters)
            throw new ArgumentException($"Handler for opcode {opcode} is generic; register a closed delegate such as Action<string, int>.", nameof(handler));

        var parameters = invoke.GetParameters();
        var types = parameters.Select(p => p.ParameterType).ToArray();
        string signature = ArgumentCodec.DescribeTypes(types);
        if (parameters.Length > ArgumentCodec.MaxArguments)
            throw new ArgumentException(
                $"Handler {signature} for opcode {opcode} has {parameters.Length} parameters; a message carries at most {ArgumentCodec.MaxArguments}. Group values into a record or an array.",
                nameof(handler));

        var shapes = new ParameterShape[parameters.Length];
        for (int i = 0; i < parameters.Length; i++)
        {
            var p = parameters[i];
            if (p.ParameterType.IsByRef)
                throw new ArgumentException(
                    $"Handler for opcode {opcode}: parameter '{p.Name}' is ref/out/in; handlers receive copies of the sent values, so declare it as a plain parameter.",
                    nameof(handler));
            if (!ParameterShape.TryCreate(p.ParameterType, out var shape, out var error))
                throw new ArgumentException(
                    $"Handler for opcode {opcode}: parameter '{p.Name}' of type {WireType.Display(p.ParameterType)} can never be received: {error}.",
                    nameof(handler));
            shapes[i] = shape!;
        }
        return new HandlerEntry(handler, shapes, Compile(handler, invoke, parameters), signature);
    }

    private static Action<object?[]> Compile(Delegate handler, MethodInfo invoke, ParameterInfo[] parameters)
    {
        var args = Expression.Parameter(typeof(object?[]), "args");
        var call = Expression.Invoke(
            Expression.Constant(handler, handler.GetType()),
            parameters.Select((p, i) => Expression.Convert(Expression.ArrayIndex(args, Expression.Constant(i)), p.ParameterType)));
        Expression body = invoke.ReturnType == typeof(void) ? call : Expression.Block(typeof(void), call);
        return Expression.Lambda<Action<object?[]>>(body, args).Compile();
    }

    /// <summary>True when the message's arguments have exactly this handler's parameter types.</summary>
    public bool Matches(in EncodedArguments args)
    {
        if (args.Count != Parameters.Length)
            return false;
        for (int i = 0; i < Parameters.Length; i++)
        {
            if (!args.Matches(i, Parameters[i]))
                return false;
        }
        return true;
    }
}
