"""``python _graph_watch.py TIMEOUT [/topic ...] [--nodes /node ...]``: exit 0 as soon as the
ROS graph (of the environment's domain) shows every topic and node named, 1 after TIMEOUT
seconds; the last line on stdout is what was seen, as JSON.

The tests wait for a process's topics and nodes with it: one rclpy node that looks at the graph
every 0.1 s answers when discovery has happened, where ``ros2 topic list`` and ``ros2 node
list`` cost a CLI start each and a fixed 2 s discovery spin per poll. The graph is the same DDS
discovery the ``ros2`` tools read.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    timeout, *names = argv
    split = names.index('--nodes') if '--nodes' in names else len(names)
    topics, nodes = set(names[:split]), set(names[split + 1:])
    import rclpy

    rclpy.init()
    node = rclpy.create_node('fibril_test_graph_watch')
    seen_topics: set[str] = set()
    seen_nodes: set[str] = set()
    deadline = time.monotonic() + float(timeout)
    try:
        while True:
            seen_topics |= {name for name, _ in node.get_topic_names_and_types()}
            seen_nodes |= {namespace.rstrip('/') + '/' + name
                           for name, namespace in node.get_node_names_and_namespaces()}
            done = topics <= seen_topics and nodes <= seen_nodes
            if done or time.monotonic() > deadline:
                print(json.dumps({'topics': sorted(seen_topics), 'nodes': sorted(seen_nodes)}),
                      flush=True)
                return 0 if done else 1
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
