"""CIFAR-10 for training: image sources (torchvision, an ImageFolder tree, synthetic), resumable
batches, and the DataModule that splits, augments and fingerprints them."""
