"""A calculator agent on reasoning-gym's basic arithmetic: reasoning-gym makes the question and scores the final
answer (`score_answer`); the agent has one tool, `calculate`.

    agentrl train env=tools env.factory=agentrl.examples.calculator:CalculatorEnv \\
        env.reward_funcs=[agentrl.examples.calculator:correct_answer] env.prompt="Compute with the calculate tool." \\
        env.expert=agentrl.examples.calculator:expert

The class follows TRL's environment_factory contract, so `GRPOTrainer(environment_factory=CalculatorEnv,
reward_funcs=[correct_answer])` takes it as it is. `ArithmeticQuestion` (with `direct_expert`) asks the same
questions with no tool: the control that says what the tool adds. `tool_or_direct_expert` mixes the two experts, the
clone that `+experiment=smollm2_calculator_cpu` starts RL from.
"""

from __future__ import annotations

import ast
import operator
import zlib

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
# small questions, which the tiny model can copy into a call: 2 to 3 terms of 1 to 2 digits
DIFFICULTY = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}


def evaluate(expression: str) -> float:
    """The value of an arithmetic expression of numbers, + - * / and parentheses (no names, no calls)."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")

    return value(ast.parse(expression.replace("=", "").strip(), mode="eval").body)


class ArithmeticQuestion:
    """One arithmetic question of reasoning-gym's `basic_arithmetic`, made from the task's seed, and no tool: the
    control for `CalculatorEnv` (the agent answers from what it knows; `direct_expert` answers right)."""

    def __init__(self):
        self.entry: dict | None = None
        self.dataset = None

    def reset(self, seed: int = 0, **kwargs) -> str:
        try:
            import reasoning_gym
        except ImportError:
            raise ImportError("the calculator example needs reasoning-gym: pip install -e '.[gem]'") from None

        self.dataset = reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=int(seed), **DIFFICULTY)
        self.entry = self.dataset[0]
        return "\n" + self.entry["question"]


class CalculatorEnv(ArithmeticQuestion):
    """The question of `ArithmeticQuestion`, and one tool: `calculate`."""

    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: Numbers with + - * / and parentheses, for example "( 3 + 4 ) * -2".

        Returns:
            The value of the expression.
        """
        result = evaluate(expression)
        return str(int(result)) if float(result).is_integer() else f"{result:.6g}"


def correct_answer(prompts, completions, environments, **kwargs) -> list[float]:
    """TRL's reward-function signature: reasoning-gym's score of each episode's final answer (the last reply)."""
    rewards = []
    for completion, env in zip(completions, environments):
        final = completion[-1]["content"] if completion and completion[-1]["role"] == "assistant" else ""
        rewards.append(float(env.dataset.score_answer(final.strip(), env.entry)))
    return rewards


def expert(env: CalculatorEnv, **columns) -> list:
    """A correct episode: the question's expression to the calculator, then its value as the answer."""
    expression = env.entry["metadata"]["expression"]
    return [{"name": "calculate", "arguments": {"expression": expression}}, env.calculate(expression)]


def direct_expert(env: ArithmeticQuestion, **columns) -> list:
    """A correct episode without the tool: the question's answer."""
    return [env.entry["answer"]]


def tool_or_direct_expert(env: CalculatorEnv, **columns) -> list:
    """A correct episode, by the calculator (`expert`) for about half of the questions and answered directly
    (`direct_expert`) for the others, chosen by the question's text: a model cloned on it still chooses between
    the two, and RL learns which one pays."""
    if zlib.crc32(env.entry["question"].encode()) % 2:
        return expert(env, **columns)
    return direct_expert(env, **columns)
