"""Every record, config and metric key that travels between server and clients.

Kebab-case, as Flower's own (``num-examples``). Server and client import these names;
no key is spelled twice anywhere else.
"""

# Message types (Flower routes "query.<action>" to @app.query("<action>")).
IDENTITY_ACTION = "identity"
MSG_IDENTITY = f"query.{IDENTITY_ACTION}"

# RecordDict entries.
ARRAYS = "arrays"
CONFIG = "config"
METRICS = "metrics"
IDENTITY = "identity"
SIGNAL = "signal"

# Config sent with train / evaluate instructions.
SERVER_ROUND = "server-round"
CLUSTER_ID = "cluster-id"
LOCAL_EPOCHS = "local-epochs"
BATCH_SIZE = "batch-size"
LR = "lr"
MOMENTUM = "momentum"
WEIGHT_DECAY = "weight-decay"
PROXIMAL_MU = "proximal-mu"

# Identity reply.
PARTITION_ID = "partition-id"
NUM_TRAIN = "num-train"
NUM_TEST = "num-test"
TRUE_GROUP = "true-group"
DEVICE = "device"

# Metrics in train / evaluate replies (a fixed key set: Flower's checks expect it).
NUM_EXAMPLES = "num-examples"
TRAIN_LOSS = "train-loss"
LOSS = "loss"
ACCURACY = "accuracy"

TRAIN_METRIC_KEYS = (NUM_EXAMPLES, TRAIN_LOSS)
EVAL_METRIC_KEYS = (NUM_EXAMPLES, LOSS, ACCURACY)
