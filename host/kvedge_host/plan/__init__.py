"""The planner: a model on a board's heap, the runtime's measured account, ranked plans with their speed and
quality (planner), the account's rules (account), quality tables (planquality) and speed tables (planspeed,
forward_cost, tiered_cost)."""
