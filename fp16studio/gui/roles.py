"""Item-data roles shared by the models and the delegates that paint them."""

from PySide6.QtCore import Qt

RAW_ROLE = Qt.ItemDataRole.UserRole + 1      # a cell's raw value, for sorting
NODE_ROLE = Qt.ItemDataRole.UserRole + 2     # the object behind a row (TensorNode, Finding)
PATH_ROLE = Qt.ItemDataRole.UserRole + 3     # a tensor row's path
COLOR_ROLE = Qt.ItemDataRole.UserRole + 4    # the palette colour a cell's chip is drawn in
