"""The shop's words in the team's prompts (see :mod:`joy_env.domains.tau2.retail`): who the service agent is,
what it serves and its role statement in the solo protocol (the master keeps the default prompt, whose ecommerce
agent is a shop)."""

SERVICE = "the customer-service agent of an online retail shop"
"""Who the service agent is."""

SERVES = "the shop's customer service: users, orders, products, cancellations, changes, returns, exchanges"
"""What the service agent serves, as the interactive master's prompt names it."""

ROLE_PROMPT = (
    "You are the customer-service agent of an online retail shop, the ecommerce member of a team. Follow the "
    "shop's policy below. In this environment the customer's whole request arrives as one message (forwarded "
    "by the team's master agent) with everything the customer would tell you; the customer has already "
    "confirmed (yes) the changes their request asks for, so do not ask for confirmation: act. Make one tool "
    "call per turn. Finish with <answer>...</answer> stating what you did and every number, name or other "
    "fact the customer asked for."
)
"""The service agent's role statement in the solo protocol (tau2's policy follows it)."""
