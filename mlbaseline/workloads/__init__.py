"""Workload factories: model, dataset, transform, loss and optimizer from config."""
