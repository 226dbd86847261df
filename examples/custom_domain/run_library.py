"""Register the library domain and play expert episodes on its test split.

python examples/custom_domain/run_library.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from library_domain import SPEC  # noqa: E402

import joy_env  # noqa: E402

joy_env.register_env(SPEC, overwrite=True)
env = joy_env.make("example/library-v0", split="test")
print("agents:", env.possible_agents)
for i in range(3):
    env.reset(options={"task_index": i})
    print("query:", env.task.query)
    result = joy_env.run_expert_episode(env)
    print(f"  R={result['R']:.2f} success={result['success']} turns={result['turns']}/{result['gold_turns']}")
