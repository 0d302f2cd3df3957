"""An independent count of CosmoFlow's FLOPs, shared by its unit and CLI tests."""


def analytic_flops(cube: int, width: float, depth: int) -> tuple[int, int]:
    """Forward and training FLOPs per sample, counted by hand from the reference's
    layers (mlcommons/hpc cosmoflow/models/cosmoflow.py:43-87), 2 per multiply-add:
    a 'same' k^3 convolution does 2 * voxels * k^3 * C_in * C_out, a dense layer
    2 * in * out. Backward costs two forwards (input and weight gradients), except
    the first convolution, whose input (the data) needs no gradient."""
    forward, first, c_in, edge = 0, None, 4, cube
    for stage in range(5):
        c_out = max(1, round(32 * 2 ** stage * width))
        for _ in range(depth):
            conv = 2 * edge ** 3 * 27 * c_in * c_out
            forward += conv
            first = conv if first is None else first
            c_in = c_out
        edge //= 2  # MaxPool3D(2)
    dense = [c_in * edge ** 3, max(1, round(128 * width)), max(1, round(64 * width)), 4]
    forward += sum(2 * a * b for a, b in zip(dense, dense[1:]))
    return forward, 3 * forward - first
