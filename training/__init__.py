"""Training with the miCSE objective (torch): model, losses, momentum queue, trainer."""
