"""The scheduler's shell: its lifecycle (server), the connections and the messages they carry
(connection, handlers), and its log format. It turns messages and timers into calls on the rooms
below and their answers into messages."""
