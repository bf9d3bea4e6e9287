"""The layers × heads grid both head charts draw on."""


def grid(columns: int) -> tuple[float, float, float, float]:
    """Cell width and height, left and top margin of a layers × heads grid that stays readable."""
    cell_w = min(44.0, max(12.0, 520 / columns))
    return cell_w, min(30.0, max(10.0, cell_w * 0.75)), 64.0, 30.0
