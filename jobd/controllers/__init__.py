"""Reconcile loops that converge every resource toward its desired state."""
