"""Solving a calibration problem: the episodes run on candidate plans (``episodes``), the
residual problem over them (``problem``), the robust objective (``objective``), derivatives
(``differentiation``), the bounded least-squares optimizer (``optimizer``) and its starting
point (``starting_point``).

Above the request (a problem is built from one), below the analysis of its solution.
"""
