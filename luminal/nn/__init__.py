"""Neural-network layers with PyTorch's constructor arguments, parameter names and layouts.

Modules own their parameters as host arrays and bind them to a graph when called (see :mod:`luminal.module`).
The full list is in docs/nn.md.
"""

from ..module import Module, ModuleDict, ModuleList, Parameter, Sequential
from . import functional, init, utils
from .activation import (CELU, ELU, GELU, SELU, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSigmoid,
                         LogSoftmax, Mish, PReLU, ReLU, ReLU6, Sigmoid, SiLU, Softmax, Softplus, Softsign, Tanh)
from .attention import MultiheadAttention
from .blocks import LoRALinear, ResNetBlock
from .conv import Conv1d, Conv2d, Conv3d, Conv4d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .dropout import Dropout, Dropout1d, Dropout2d, Dropout3d
from .linear import Flatten, Identity, Linear
from .layers_extra import (GLU, Bilinear, ChannelShuffle, CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d,
                           ConstantPad2d, ConstantPad3d, CosineEmbeddingLoss, CosineSimilarity, Fold, GaussianNLLLoss,
                           Hardshrink, HingeEmbeddingLoss, LocalResponseNorm, MarginRankingLoss, MultiLabelSoftMarginLoss,
                           PairwiseDistance, ParameterDict, ParameterList, PixelShuffle, PixelUnshuffle, PoissonNLLLoss,
                           ReflectionPad1d, ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d,
                           ReplicationPad3d, RReLU, Softmax2d, Softmin, Softshrink, SoftMarginLoss, Tanhshrink,
                           Threshold, TripletMarginLoss, Unflatten, Unfold, ZeroPad1d, ZeroPad2d, ZeroPad3d)
from .loss_modules import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, InstanceNorm1d, InstanceNorm2d,
                            InstanceNorm3d, LayerNorm, RMSNorm)
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d,
                      AdaptiveMaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d, GlobalAvgPool, MaxPool1d, MaxPool2d,
                      MaxPool3d, MaxUnpool1d, MaxUnpool2d, MaxUnpool3d)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .sparse import Embedding
from .summary import parameter_count, summary
from .upsample import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d
from .transformer import (MLP, Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
                          TransformerEncoderLayer)

__all__ = [name for name in dir() if not name.startswith("_")]
