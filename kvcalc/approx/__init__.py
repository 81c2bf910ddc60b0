"""Approximate attention (issue 12): analytic costs, NumPy reference implementations, error metrics and spectrum."""
