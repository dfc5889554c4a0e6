"""The embedded broker: kombu's filesystem transport, with messages written atomically.

kombu's own `_put` opens the final file name and then writes, so a consumer polling the
folder can take the file while it is still empty and crash on it. Here each message is
written under a temporary name and renamed into place, which POSIX makes atomic.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

#: `broker_transport` value that selects this transport for a `filesystem://` URL
TRANSPORT = "tickwork.worker.tick.broker:Transport"


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".partial"  # does not match the `<queue>.msg` pattern readers take
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise filesystem.ChannelError(f"cannot add {final!r} to the broker folder") from exc


class Transport(filesystem.Transport):
    Channel = Channel
