//! The buffers of the executor: activations kept between the forward and the backward,
//! per-chunk scratch, and the layer geometry they are sized from.

use super::super::spec::{size, Kind, LayerPlan, NetSpec};
use crate::cpu::kernels::{ConvGeometry, Patches};

/// Chunks per batch, fixed so that sums are bit-reproducible whatever the thread count.
pub const CHUNKS: usize = 16;

/// Per-chunk scratch, sized once for the network.
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    /// Per layer, a conv layer's im2col matrix of one sample (`None` for other kinds).
    pub(super) patches: Vec<Option<Patches>>,
    /// The gradient of an im2col matrix (the largest of the network's).
    pub(super) du: Vec<f32>,
    /// A conv layer's bias gradient (the widest layer's Cout).
    pub(super) bias: Vec<f32>,
    /// Activation gradients, in turn the output and the input gradient of a layer.
    pub(super) grad_a: Vec<f32>,
    /// See `grad_a`.
    pub(super) grad_b: Vec<f32>,
    /// One sample's parameter gradient (conv layers; every layer when materialised).
    pub(super) psg: Vec<f32>,
    /// The chunk's clipped gradient sum.
    pub(super) acc: Vec<f32>,
    /// Per sample of the chunk, each linear layer's output gradient (book-keeping).
    pub(super) linear_grads: Vec<f32>,
    /// Per sample of the chunk, each linear layer's clip factor.
    pub(super) linear_factors: Vec<f32>,
    /// One linear layer's inputs for the chunk, with a ones column.
    pub(super) linear_inputs: Vec<f32>,
    /// One sample's squared norm per parametric layer.
    pub(super) layer_sq: Vec<f32>,
    /// Per layer, one sample's output, where the forward writes a layer whose output it
    /// does not keep for the batch ([`Keep::kept`]).
    pub(super) transient: Vec<Vec<f32>>,
    /// Per max-pool layer, one sample's argmax, where an inference forward writes it
    /// (empty for other layers).
    pub(super) transient_argmax: Vec<Vec<u32>>,
}

/// What a forward keeps in the workspace for the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// A training forward: every output and argmax the backward reads ([`output_kept`]).
    Backward,
    /// An inference forward (evaluation, SA-DPSGD's energy): the logits only; the other
    /// outputs go to one sample's scratch, and a backward after it is refused (the
    /// workspace's batch is 0).
    Logits,
}

impl Keep {
    /// Whether this forward writes layer `l`'s output for the whole batch.
    pub(super) fn kept(self, layers: &[LayerPlan], l: usize) -> bool {
        match self {
            Keep::Backward => output_kept(layers, l),
            Keep::Logits => l + 1 == layers.len(),
        }
    }

    /// Whether this forward writes max-pool layer `l`'s argmax for the whole batch (only
    /// a training forward does; other layers have none).
    pub(super) fn argmax_kept(self, layers: &[LayerPlan], l: usize) -> bool {
        self == Keep::Backward && is_max_pool(&layers[l])
    }
}

fn is_max_pool(layer: &LayerPlan) -> bool {
    matches!(layer.kind, Kind::MaxPool { .. })
}

/// Activations kept between the forward and the backward, reused across steps.
#[derive(Clone, Debug, Default)]
pub struct Workspace {
    /// The batch of the last training forward (0 before any, or after an inference one).
    pub(super) batch: usize,
    /// The batch's input, NHWC.
    pub(super) input: Vec<f32>,
    /// Per layer, the batch's outputs (empty for a layer whose output no forward kept,
    /// [`Keep::kept`]).
    pub(super) outputs: Vec<Vec<f32>>,
    /// Per max-pool layer, the input index of each output (empty for other layers).
    pub(super) argmax: Vec<Vec<u32>>,
    /// Per conv layer, its parameters transposed by the last forward (empty for others).
    pub(super) kernels: Vec<Vec<f32>>,
    pub(super) scratch: Vec<Scratch>,
}

/// The activations of the last forward, read by the backward.
#[derive(Clone, Copy)]
pub(super) struct Activations<'a> {
    input: &'a [f32],
    outputs: &'a [Vec<f32>],
    argmax: &'a [Vec<u32>],
}

impl<'a> Activations<'a> {
    /// Sample `i`'s input to layer `l`, of `len` values.
    #[inline]
    pub(super) fn layer_input(&self, l: usize, i: usize, len: usize) -> &'a [f32] {
        if l == 0 {
            &self.input[i * len..][..len]
        } else {
            &self.outputs[l - 1][i * len..][..len]
        }
    }

    /// Sample `i`'s output of layer `l`, of `len` values.
    #[inline]
    pub(super) fn layer_output(&self, l: usize, i: usize, len: usize) -> &'a [f32] {
        &self.outputs[l][i * len..][..len]
    }

    /// Sample `i`'s argmax of max-pool layer `l`, of `len` values.
    #[inline]
    pub(super) fn argmax(&self, l: usize, i: usize, len: usize) -> &'a [u32] {
        &self.argmax[l][i * len..][..len]
    }
}

impl Workspace {
    /// The batch size of the last training forward, which the backward differentiates (0
    /// before any, and after an inference forward: [`Keep::Logits`]).
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The activations of the last forward, and the per-chunk scratch.
    pub(super) fn split(&mut self) -> (Activations<'_>, &mut [Scratch]) {
        let activations = Activations {
            input: &self.input,
            outputs: &self.outputs,
            argmax: &self.argmax,
        };
        (activations, &mut self.scratch)
    }

    /// Grows (never shrinks) the buffers that a forward of `batch` samples of `spec`
    /// writes under `keep`.
    pub(super) fn ensure(&mut self, spec: &NetSpec, batch: usize, keep: Keep) {
        let layers = &spec.layers;
        if self.outputs.len() != layers.len() || self.scratch.len() != CHUNKS {
            *self = Workspace {
                scratch: vec![Scratch::new(spec); CHUNKS],
                outputs: vec![Vec::new(); layers.len()],
                argmax: vec![Vec::new(); layers.len()],
                ..Workspace::default()
            };
        }
        grow(&mut self.input, batch * spec.input_size());
        for (l, layer) in layers.iter().enumerate() {
            if keep.kept(layers, l) {
                grow(&mut self.outputs[l], batch * size(layer.output));
            }
            if keep.argmax_kept(layers, l) {
                grow(&mut self.argmax[l], batch * size(layer.output));
            }
        }
        self.batch = match keep {
            Keep::Backward => batch,
            Keep::Logits => 0,
        };
    }
}

impl Scratch {
    /// One chunk's scratch for the network.
    fn new(spec: &NetSpec) -> Scratch {
        let layers = &spec.layers;
        let max_u = layers
            .iter()
            .filter_map(|l| conv_geometry(l).map(|g| g.rows() * g.taps()))
            .max()
            .unwrap_or(0);
        let max_act = layers
            .iter()
            .map(|l| size(l.input).max(size(l.output)))
            .max()
            .unwrap_or(0);
        Scratch {
            patches: layers
                .iter()
                .map(|l| conv_geometry(l).map(Patches::new))
                .collect(),
            du: vec![0.0; max_u],
            bias: vec![0.0; layers.iter().filter_map(conv_cout).max().unwrap_or(0)],
            grad_a: vec![0.0; max_act],
            grad_b: vec![0.0; max_act],
            psg: vec![0.0; spec.num_params],
            acc: vec![0.0; spec.num_params],
            linear_grads: Vec::new(),
            linear_factors: Vec::new(),
            linear_inputs: Vec::new(),
            layer_sq: vec![0.0; layers.iter().filter(|l| l.params.1 > 0).count()],
            transient: layers.iter().map(|l| vec![0.0; size(l.output)]).collect(),
            transient_argmax: layers
                .iter()
                .map(|l| vec![0; if is_max_pool(l) { size(l.output) } else { 0 }])
                .collect(),
        }
    }
}

/// Grows `buf` to `len` values (never shrinks it).
fn grow<T: Clone + Default>(buf: &mut Vec<T>, len: usize) {
    if buf.len() < len {
        buf.resize(len, T::default());
    }
}

/// Whether the backward reads layer `l`'s output, so that the forward keeps it for the
/// whole batch: the last layer's (the logits), an activation's (its derivative is read
/// off its output) and the input of a layer with parameters (its gradient needs it). The
/// others — a convolution's before its activation, a pooling's before a flatten — are
/// written to one sample's [`Scratch::transient`] buffer and read by the next layer only.
/// Their batch buffers stay empty, so that a backward reading one fails loudly.
pub(super) fn output_kept(layers: &[LayerPlan], l: usize) -> bool {
    matches!(layers[l].kind, Kind::Tanh | Kind::Relu)
        || layers.get(l + 1).is_none_or(|next| next.params.1 > 0)
}

/// The geometry of a conv layer (`None` for other kinds).
pub(super) fn conv_geometry(layer: &LayerPlan) -> Option<ConvGeometry> {
    match layer.kind {
        Kind::Conv {
            kernel,
            stride,
            padding,
            cin,
            ..
        } => Some(ConvGeometry {
            h: layer.input.0,
            w: layer.input.1,
            cin,
            kernel,
            stride,
            padding,
            oh: layer.output.0,
            ow: layer.output.1,
        }),
        _ => None,
    }
}

/// The output channels of a conv layer (`None` for other kinds).
pub(super) fn conv_cout(layer: &LayerPlan) -> Option<usize> {
    match layer.kind {
        Kind::Conv { cout, .. } => Some(cout),
        _ => None,
    }
}

/// Samples per chunk for a batch.
pub(super) fn chunk_len(batch: usize) -> usize {
    batch.div_ceil(CHUNKS).max(1)
}

/// (in, out) of a linear layer.
pub(super) fn linear_shape(layer: &LayerPlan) -> Option<(usize, usize)> {
    match layer.kind {
        Kind::Linear { nin, nout } => Some((nin, nout)),
        _ => None,
    }
}
