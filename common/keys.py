"""Every record, config and metric key that travels between server and clients.

Kebab-case, as Flower's own (``num-examples``). Server and client import these names;
no key is spelled twice anywhere else.
"""

# RecordDict entries.
ARRAYS = "arrays"
CONFIG = "config"
METRICS = "metrics"
IDENTITY = "identity"
SIGNAL = "signal"

# Query actions (Flower routes "query.<action>" to @app.query("<action>")).
IDENTITY_ACTION = "identity"
LOSSES_ACTION = "losses"  # loss of each of K models on the client's TRAIN split
FINAL_LAYER_ACTION = "head"  # final layer (Classifier.head) after training the sent model (FedClust)
SUBSPACES_ACTION = "subspaces"  # per-class truncated-SVD bases of the TRAIN data (PACFL, FLAG)
UPDATE_ACTION = "update"  # trained-minus-sent model after local training (FL+HC, FLAG)
CLUSTER_EPOCHS = "cluster-epochs"  # config of query.head: local epochs on the sent model
CLUSTER_STEPS = "cluster-steps"  # config of query.head / query.update / train: mini-batches instead of epochs when > 0
SUBSPACE_VECTORS = "subspace-vectors"  # config of query.subspaces: p vectors per class
WITH_COUNTS = "with-counts"  # config of query.subspaces: also send the class counts
FORCES_ACTION = "forces"  # CFLGT: per-class softmax pulling/pushing forces on the TRAIN split
PROFILE_ACTION = "profile"  # CFL-GP: gradient or model gap on one broadcast model, compressed
PROFILE_PROTOCOL = "profile-protocol"  # "model-gap" (Alg. 4) or "gradient" (Alg. 1)
PROFILE_SEED = "profile-seed"  # seed of the coordinate subset (common.clustering.compression)
PROFILE_SIZE = "profile-size"  # d_hat: coordinates the client returns
HOLDOUT_ACTION = "holdout"  # train on 90% of the TRAIN split, score the held-out 10% (FLAG)
HOLDOUT_FRACTION = "holdout-fraction"  # config of query.holdout: the validation share of the train split


def query_type(action: str) -> str:
    """The message type Flower routes to ``@app.query(action)``."""
    return f"query.{action}"


def model_record(k: int) -> str:
    """Name of the ``k``-th model's ArrayRecord when one message carries several models."""
    return f"{ARRAYS}-{k}"


def is_model_record(name: str) -> bool:
    """Whether a record named ``name`` holds a model (``arrays`` or ``arrays-<k>``), not a signal."""
    return name == ARRAYS or (name.startswith(f"{ARRAYS}-") and name[len(ARRAYS) + 1 :].isdigit())


MSG_IDENTITY = query_type(IDENTITY_ACTION)

# Config sent with train / evaluate / query instructions.
SERVER_ROUND = "server-round"
CLUSTER_ID = "cluster-id"
LOCAL_EPOCHS = "local-epochs"
BATCH_SIZE = "batch-size"
LR = "lr"
MOMENTUM = "momentum"
WEIGHT_DECAY = "weight-decay"
PROXIMAL_MU = "proximal-mu"
NUM_MODELS = "num-models"  # how many ``arrays-<k>`` records a message carries

# Identity reply.
PARTITION_ID = "partition-id"
NUM_TRAIN = "num-train"
NUM_TEST = "num-test"
TRUE_GROUP = "true-group"
DEVICE = "device"
NUM_VAL = "num-val"
CLASS_COUNTS = "class-counts"  # train samples of each class (classification only)

# Metrics in train / evaluate replies (a fixed key set: Flower's checks expect it).
NUM_EXAMPLES = "num-examples"
TRAIN_LOSS = "train-loss"
LOSS = "loss"
ACCURACY = "accuracy"

TRAIN_METRIC_KEYS = (NUM_EXAMPLES, TRAIN_LOSS)
EVAL_METRIC_KEYS = (NUM_EXAMPLES, LOSS, ACCURACY)

# The end of a run: each client's own cluster model (``query.model``), written to node config ``model-out``.
MODEL_ACTION = "model"
MODEL_OUT = "model-out"  # node config: the file a client writes its final cluster model to
MODEL_WRITTEN = "model-written"  # reply: 1 when the client wrote the model, 0 when it has no model-out
